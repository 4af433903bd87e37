import fc from 'fast-check';
import { WEBHOOK_EVENT_TYPES } from '../../db/schema/index.js';
import { EMAIL_EVENT_TYPES } from '../../server/core/events.js';
import { SCOPES } from '../../server/core/scopes.js';
import { TEMPLATES } from '../../server/core/templates.js';
import { type Json, type Piece, badUtf8, fromValue, hostileValue, hugeString, mutate, mutation, oddString, piecesToExpression, toPieces } from './fuzz-json.js';
import { cursorValue, idSegment, limitValue, pct, query, sinceValue, wtf8 } from './fuzz-url.js';

/**
 * Requests for the API fuzz test, one arbitrary per endpoint, built from docs/api/contract.md's field lists (and the template table,
 * so a renamed variable is followed): well-shaped ones reach the deep paths, hostile ones break every rule a client
 * can break. Each request prints as a replayable description.
 */

/** What the service under test holds, so generated requests can name real ids, a verified domain and live cursors. */
export interface FuzzWorld {
  /** Verified and sending. */
  domain: string;
  /** Connected, not verified. */
  pendingDomain: string;
  sub: { id: string; domain: string };
  ids: { email: string; domain: string; suppression: string };
  /** Addresses on the list at the start (POST /suppressions may add them back after a delete). */
  suppressed: string[];
  cursors: Record<'emails' | 'domains' | 'accounts' | 'keys' | 'suppressions' | 'webhooks' | 'webhookDeliveries' | 'events' | 'templates', string>;
  webhooks: {
    /**
     * The one endpoint test pings and replays aim at (never deleted): its URL is the HTTPS receiver on loopback, so
     * a ping never leaves the machine. No other real endpoint id is ever pinged.
     */
    fixture: string;
    /** Endpoints of the key's account that DELETE /webhooks/{id} may remove. */
    deletable: string[];
    /** A host name the test DNS server answers with 127.0.0.1, and the receiver's port (POST /webhooks that succeed). */
    host: string;
    port: number;
  };
  /** ISO times around the key's account's recorded outcomes (since and until of GET /events and replays). */
  eventTimes: string[];
  /** A real Postgres on loopback reached by a name the test DNS server answers: `url` connects (POST /database 200). */
  database: { url: string; host: string; port: number };
  /** The key's account's own template (naming its layout) and the layout, saved before the run. */
  templates: { template: string; layout: string };
}

export type Who = 'key' | 'none' | { raw: string };
export type ActingFor = 'self' | 'sub' | { raw: string };

export interface FuzzRequest {
  method: string;
  /** Relative to /api/v1, query included, already percent-encoded where it needs to be. */
  path: string;
  auth: Who;
  account: ActingFor;
  headers: Record<string, string>;
  body: Piece[] | null;
}

/** A value that toJson keeps as the tree it already is (a huge string, say) inside a plain well-shaped object. */
class Node {
  constructor(readonly node: Json) {}
}

function toJson(v: unknown): Json {
  if (v instanceof Node) return v.node;
  if (Array.isArray(v)) return { t: 'arr', items: v.map(toJson) };
  if (v !== null && typeof v === 'object') {
    return {
      t: 'obj',
      entries: Object.entries(v as Record<string, unknown>)
        .filter(([, x]) => x !== undefined)
        .map(([k, x]) => [k, toJson(x)]),
    };
  }
  return fromValue(v);
}

function replay(req: FuzzRequest): string {
  const auth = req.auth === 'key' ? 'Bearer <live key with every scope>' : req.auth === 'none' ? null : JSON.stringify(req.auth.raw);
  const account = req.account === 'self' ? null : req.account === 'sub' ? '<the fuzz sub-account id>' : JSON.stringify(req.account.raw);
  const lines = [`${req.method} /api/v1${req.path}`];
  if (auth !== null) lines.push(`Authorization: ${auth}`);
  if (account !== null) lines.push(`X-Service-Account: ${account}`);
  for (const [k, v] of Object.entries(req.headers)) lines.push(`${k}: ${JSON.stringify(v)}`);
  if (req.body) lines.push(`body: ${piecesToExpression(req.body)}`);
  return lines.join('\n');
}

function request(req: FuzzRequest): FuzzRequest {
  return Object.defineProperty(req, fc.toStringMethod, { value: () => replay(req), enumerable: false });
}

// ---- headers -------------------------------------------------------------------------------------------------

const headerText = fc.string({ unit: 'grapheme-ascii', maxLength: 80 });

const auth: fc.Arbitrary<Who> = fc.oneof(
  { arbitrary: fc.constant('key' as const), weight: 24 },
  { arbitrary: fc.constant('none' as const), weight: 1 },
  {
    arbitrary: fc
      .oneof(
        headerText.map((s) => `Bearer ${s}`),
        headerText,
        fc.constantFrom('Bearer', 'Basic dXNlcjpwYXNz', 'bearer  '),
      )
      .map((raw) => ({ raw })),
    weight: 1,
  },
);

/** Acting for the key's own account mostly; the fixture's sub-account or a made-up id now and then. */
const actingFor: fc.Arbitrary<ActingFor> = fc.oneof(
  { arbitrary: fc.constant('self' as const), weight: 12 },
  { arbitrary: fc.constant('sub' as const), weight: 3 },
  { arbitrary: fc.oneof(fc.uuid(), headerText).map((raw) => ({ raw })), weight: 1 },
);

const contentType = fc.oneof(
  { arbitrary: fc.constant({ 'content-type': 'application/json' }), weight: 12 },
  {
    arbitrary: fc
      .constantFrom(
        'text/plain',
        'application/json; charset=utf-16',
        'multipart/form-data; boundary=x',
        'application/x-www-form-urlencoded',
        'application/json; charset=latin1',
      )
      .map((t) => ({ 'content-type': t })),
    weight: 1,
  },
  { arbitrary: fc.constant({}), weight: 1 },
);

// ---- bodies --------------------------------------------------------------------------------------------------

/** Text that turns well-formed JSON into something else: cut, invalid UTF-8 inserted, a BOM, trailing garbage, UTF-16. */
type Corruption =
  | { kind: 'cut'; at: number }
  | { kind: 'insert'; at: number; bytes: number[] }
  | { kind: 'bom' }
  | { kind: 'trail'; text: string }
  | { kind: 'utf16' };

const corruption: fc.Arbitrary<Corruption> = fc.oneof(
  fc.record({ kind: fc.constant('cut' as const), at: fc.nat() }),
  fc.record({ kind: fc.constant('insert' as const), at: fc.nat(), bytes: badUtf8 }),
  fc.record({ kind: fc.constant('bom' as const) }),
  fc.record({ kind: fc.constantFrom('trail' as const), text: fc.constantFrom('}', ']', 'x', ',', '{}', '\u0000', ' // comment', 'null') }),
  fc.record({ kind: fc.constant('utf16' as const) }),
);

function corrupt(text: string, c: Corruption): Piece[] {
  switch (c.kind) {
    case 'cut':
      return [text.slice(0, c.at % Math.max(1, text.length))];
    case 'insert': {
      const at = c.at % (text.length + 1);
      return [text.slice(0, at), { bytes: c.bytes }, text.slice(at)];
    }
    case 'bom':
      return ['\ufeff', text];
    case 'trail':
      return [text, c.text];
    case 'utf16':
      return [{ bytes: [...Buffer.from(text, 'utf16le')] }];
  }
}

/**
 * Bodies around a well-shaped value: as is, with one to three changes (wrong types, missing and extra fields, deep
 * nesting, huge and odd strings, `__proto__` keys), replaced by any JSON, corrupted as text, random bytes or empty.
 */
function bodyFor(shaped: fc.Arbitrary<unknown>, fields: readonly string[]): fc.Arbitrary<Piece[]> {
  const tree = shaped.map(toJson);
  return fc.oneof(
    { arbitrary: tree.map((t) => toPieces(t)), weight: 5 },
    { arbitrary: fc.tuple(tree, fc.array(mutation(fields), { minLength: 1, maxLength: 3 })).map(([t, ms]) => toPieces(mutate(t, ms))), weight: 6 },
    { arbitrary: hostileValue(fields).map((t) => toPieces(t)), weight: 2 },
    {
      arbitrary: fc.tuple(shaped, corruption).map(([v, c]) =>
        corrupt(
          JSON.stringify(v, (_k, x: unknown) => (x instanceof Node ? 'x' : x)),
          c,
        ),
      ),
      weight: 2,
    },
    { arbitrary: fc.uint8Array({ maxLength: 2048 }).map((b) => [{ bytes: [...b] }]), weight: 1 },
    { arbitrary: fc.constantFrom('', ' ', '\n', 'null', '[]', '{}', '"x"', '0').map((t) => [t]), weight: 1 },
  );
}

// ---- well-shaped values from the spec's field lists ----------------------------------------------------------

const localPart = fc.stringMatching(/^[a-z0-9]{1,8}(?:[._+-][a-z0-9]{1,8}){0,2}$/);
const displayName = fc.oneof(
  { arbitrary: fc.lorem({ maxCount: 3 }), weight: 3 },
  { arbitrary: oddString(30), weight: 1 },
  { arbitrary: oddString(90), weight: 1 },
);

const mailbox = (domain: string) =>
  fc.oneof(
    { arbitrary: localPart.map((l) => `${l}@${domain}`), weight: 6 },
    { arbitrary: fc.tuple(displayName, localPart).map(([n, l]) => `${n} <${l}@${domain}>`), weight: 4 },
    { arbitrary: fc.tuple(displayName, localPart).map(([n, l]) => `"${n}" <${l}@${domain}>`), weight: 1 },
    { arbitrary: fc.tuple(localPart, fc.domain()).map(([l, d]) => `${l}@${d}`), weight: 1 },
  );

/** Recipients: plain addresses mostly (so sends get through), RFC-valid odd ones and broken ones now and then. */
const address = fc.oneof(
  {
    arbitrary: fc
      .tuple(localPart, fc.constantFrom('example.net', 'example.org', 'customer.example', 'b\u00fccher.example', 'mail.example.co.uk'))
      .map(([l, d]) => `${l}@${d}`),
    weight: 12,
  },
  { arbitrary: fc.tuple(localPart, fc.domain()).map(([l, d]) => `${l}@${d}`), weight: 2 },
  { arbitrary: fc.emailAddress(), weight: 1 },
  {
    arbitrary: fc.constantFrom(
      'customer@example.net',
      'jos\u00e9@b\u00fccher.example',
      'USER@EXAMPLE.NET',
      'a@[127.0.0.1]',
      'x@localhost',
      '"a b"@example.net',
      'a@b@example.net',
    ),
    weight: 2,
  },
  { arbitrary: fc.tuple(oddString(12, 1), fc.domain()).map(([l, d]) => `${l}@${d}`), weight: 1 },
);

/** A template variable: ordinary text, odd text, a long line, or a string of up to nearly 1 MB. */
const textVar = fc.oneof(
  { arbitrary: fc.lorem({ maxCount: 6 }), weight: 4 },
  { arbitrary: oddString(60), weight: 4 },
  { arbitrary: fc.string({ maxLength: 2_000 }), weight: 1 },
  { arbitrary: hugeString().map((n) => new Node(n)), weight: 1 },
);
const urlVar = fc.oneof(
  { arbitrary: fc.webUrl({ withQueryParameters: true, withFragments: true }), weight: 4 },
  {
    arbitrary: fc.constantFrom(
      'javascript:alert(1)',
      'http://',
      'https://exa mple.com',
      'mailto:x@example.net',
      'https://example.com/\u202e',
      'data:text/html,x',
    ),
    weight: 1,
  },
);

/** The template object of a send: a known template with its variables (each present or not), or an unknown name. */
const template = fc.oneof(
  ...Object.entries(TEMPLATES).map(([name, def]) => {
    const vars = Object.fromEntries(Object.entries(def.variables).map(([k, spec]) => [k, spec.kind === 'url' ? urlVar : textVar]));
    const required = Object.entries(def.variables)
      .filter(([, spec]) => spec.required)
      .map(([k]) => k);
    return fc.record(vars, { requiredKeys: required }).map((v) => ({ ...v, name }));
  }),
  oddString(20).map((name) => ({ name })),
);

const tags = fc.dictionary(fc.stringMatching(/^[A-Za-z0-9_-]{1,40}$/), fc.oneof(oddString(40), fc.string({ maxLength: 300 })), { maxKeys: 12 });

const TEMPLATE_VARIABLES = [...new Set(Object.values(TEMPLATES).flatMap((t) => Object.keys(t.variables)))];
const SEND_FIELDS = ['from', 'to', 'replyTo', 'template', 'tags', 'sandbox', 'name', ...TEMPLATE_VARIABLES];

/** A send from `domain` (now and then from `pending`, connected but not verified) to ordinary or suppressed recipients. */
function sendRequest(domain: string, pending: string, suppressed: string[]) {
  const to = fc.oneof({ arbitrary: address, weight: 20 }, { arbitrary: fc.constantFrom(...suppressed), weight: 1 });
  return fc.record(
    {
      from: fc.oneof({ arbitrary: mailbox(domain), weight: 12 }, { arbitrary: mailbox(pending), weight: 1 }),
      to: fc.oneof(
        { arbitrary: to, weight: 4 },
        { arbitrary: fc.array(to, { minLength: 1, maxLength: 5 }), weight: 3 },
        { arbitrary: fc.array(to, { maxLength: 55 }), weight: 1 },
      ),
      replyTo: address,
      template,
      tags,
      sandbox: fc.oneof({ arbitrary: fc.constant(true), weight: 2 }, { arbitrary: fc.constant(false), weight: 1 }),
    },
    { requiredKeys: ['from', 'to', 'template'] },
  );
}

const scopes = fc.oneof(
  fc.subarray([...SCOPES]),
  fc.array(fc.oneof(fc.constantFrom(...SCOPES), fc.constantFrom('emails:*', 'admin', 'EMAILS:SEND', '')), { maxLength: 16 }),
);

// ---- webhooks and events -------------------------------------------------------------------------------------

/**
 * Webhook URLs: the receiver's name (which resolves to loopback, allowed by ALLOW_PRIVATE_TARGETS) spelled many ways,
 * random names (NXDOMAIN from the test DNS server at once), IP literals (public ones are stored, never posted to:
 * only the fixture endpoint is ever pinged), and URLs the rules refuse (http, credentials, no host, too long).
 */
function webhookUrl(host: string, port: number): fc.Arbitrary<string> {
  const path = fc.oneof(
    fc.constant('/hook'),
    fc.webPath(),
    fc.webSegment().map((s) => `/${s}?x=${s}#f`),
  );
  return fc.oneof(
    { arbitrary: path.map((p) => `https://${host}:${port}${p}`), weight: 4 },
    {
      arbitrary: fc.constantFrom(
        `https://${host.toUpperCase()}:${port}/hook`,
        `https://${host}.:${port}/hook`,
        `https://${host}/hook`,
        `HTTPS://${host}:${port}`,
        `https://localhost:${port}/hook`,
        `https://sub.localhost/`,
        `https://127.0.0.1:${port}/hook`,
        `https://[::1]:${port}/hook`,
        'https://0x7f000001/',
        'https://2130706433/',
        'https://0177.1/',
        'https://[::ffff:127.0.0.1]/',
        'https://8.8.8.8/',
        'https://[2001:4860:4860::8888]/in',
        'https://0.0.0.0/',
        'https://169.254.169.254/latest/meta-data/',
      ),
      weight: 2,
    },
    { arbitrary: fc.webUrl({ validSchemes: ['https'], withQueryParameters: true, withFragments: true }), weight: 3 },
    { arbitrary: fc.webUrl({ validSchemes: ['http', 'ftp', 'wss'] }), weight: 1 },
    {
      arbitrary: fc.constantFrom(
        '',
        'https://',
        'https://.',
        'https://..',
        'https:///hook',
        `https://user:pw@${host}:${port}/hook`,
        `https://user@${host}:${port}/hook`,
        `https://:pw@${host}/`,
        `//${host}/hook`,
        `${host}/hook`,
        'https://exa mple.com/',
        'https://%00/',
        'https://a%2Fb.example/',
        'https://b\u00fccher.example/',
        'https://xn--/',
        'https://-a-.example/',
        'https://a_b.example/',
        `https://${'a'.repeat(64)}.example/`,
        `https://${Array.from({ length: 130 }, () => 'ab').join('.')}/`,
        `https://${host}:99999/`,
        `https://${host}:0/`,
        'javascript:alert(1)',
        'data:text/plain,x',
        'https://[::1/',
        'https://[fe80::1%25eth0]/',
      ),
      weight: 2,
    },
    {
      arbitrary: fc.integer({ min: 1_990, max: 2_010 }).map((n) => `https://${host}:${port}/${'a'.repeat(Math.max(0, n - `https://${host}:${port}/`.length))}`),
      weight: 1,
    },
    { arbitrary: oddString(60), weight: 1 },
  );
}

/** Event type lists: well-shaped subsets, repeats, unknown and cased names, empty, past the 50 item cap. */
function eventList(types: readonly string[]): fc.Arbitrary<string[]> {
  const name = fc.oneof(
    { arbitrary: fc.constantFrom(...types), weight: 8 },
    { arbitrary: fc.constantFrom('EMAIL.DELIVERED', 'email.*', 'email.sent', 'delivered', 'ping ', ''), weight: 1 },
    { arbitrary: oddString(20), weight: 1 },
  );
  return fc.oneof(
    { arbitrary: fc.subarray([...types], { minLength: 1 }), weight: 6 },
    { arbitrary: fc.array(name, { minLength: 1, maxLength: 8 }), weight: 3 },
    { arbitrary: fc.constant([] as string[]), weight: 1 },
    { arbitrary: fc.array(fc.constantFrom(...types), { minLength: 49, maxLength: 60 }), weight: 1 },
  );
}

/** A date-time for since/until: the generic ones, or one around the recorded outcomes. */
const eventTime = (times: string[]) => fc.oneof({ arbitrary: sinceValue, weight: 2 }, { arbitrary: fc.constantFrom(...times), weight: 3 });

/**
 * A replay's body: a window over the recorded outcomes (since alone, or since before until) that queues deliveries,
 * or any two date-times (until before since, odd spellings), each with an event type list or none.
 */
const replayBody = (times: string[]) => {
  const ordered = fc
    .tuple(fc.constantFrom(...times), fc.constantFrom(...times))
    .filter(([a, b]) => Date.parse(a) !== Date.parse(b))
    .map(([a, b]) => (Date.parse(a) < Date.parse(b) ? [a, b] : [b, a]));
  const events = fc.option(eventList(EMAIL_EVENT_TYPES), { nil: undefined, freq: 2 });
  return fc.oneof(
    { arbitrary: fc.record({ since: fc.constantFrom(...times), events }), weight: 2 },
    { arbitrary: fc.record({ window: ordered, events }).map(({ window: [since, until], events }) => ({ since, until, events })), weight: 2 },
    {
      arbitrary: fc.record({ since: eventTime(times), until: eventTime(times), events: eventList(EMAIL_EVENT_TYPES) }, { requiredKeys: ['since'] }),
      weight: 3,
    },
  );
};

/**
 * Database URLs: the working one, its near misses (each refused by one rule of server/customer-db/url.ts, or failing at one
 * step: a closed port, a wrong password, a missing database, a name that does not resolve), and junk. Every host is
 * on loopback or a test name, so nothing is ever asked of the internet and every failure is answered at once.
 */
function databaseUrl(db: FuzzWorld['database']): fc.Arbitrary<string> {
  const good = db.url;
  const u = new URL(good.replace(/^postgresql:/, 'http:'));
  const auth = `${u.username}:${u.password}`;
  return fc.oneof(
    {
      arbitrary: fc.constantFrom(
        good,
        `${good}?sslmode=verify-full`,
        `${good}?sslmode=require`,
        good.replace(/^postgresql:/, 'postgres:'),
        `${good}?sslmode=no-verify`,
      ),
      weight: 4,
    },
    {
      arbitrary: fc.constantFrom(
        `${good}?sslmode=disable`,
        `${good}?sslmode=prefer`,
        `${good}?sslmode=allow`,
        `${good}?sslmode=bogus`,
        `${good}?sslrootcert=/etc/passwd`,
        `${good}?sslkey=%2Froot%2F.ssh%2Fid_rsa`,
        `${good}?passfile=/root/.pgpass`,
        `${good}?service=x`,
        `${good}?options=-c%20search_path%3Dpublic`,
        `${good}?replication=database`,
        `${good}?host=/tmp`,
        `${good}?sslmode=verify&sslmode=no-verify`,
        `${good}#fragment`,
        good.replace(`:${db.port}/`, ':1/'),
        good.replace(`${auth}@`, `${u.username}:wrong@`),
        good.replace(`${auth}@`, 'nobody@'),
        good.replace(/\/[^/?]+$/, '/no_such_db'),
        good.replace(db.host, `${db.host},${db.host}`),
        good.replace(db.host, 'nxdomain.pg.test'),
        good.replace(db.host, '127.0.0.1'),
        good.replace(db.host, '[::1]'),
        `postgresql://${auth}@%2Ftmp/db`,
        `postgresql://${auth}@/db?host=/var/run/postgresql`,
        'postgresql://',
        `postgresql://${db.host}/db`,
        `mysql://${auth}@${db.host}/db`,
        `socket:/tmp/.s.PGSQL.5432`,
        `${good}?${'a'.repeat(2000)}=1`,
      ),
      weight: 4,
    },
    { arbitrary: oddString(80), weight: 1 },
    { arbitrary: fc.webUrl(), weight: 1 },
  );
}

// ---- the endpoints -------------------------------------------------------------------------------------------

const get = (path: fc.Arbitrary<string>) =>
  fc.record({ path, auth, account: actingFor }).map(({ path, auth, account }) => request({ method: 'GET', path, auth, account, headers: {}, body: null }));

function withBody(
  method: string,
  path: fc.Arbitrary<string>,
  shaped: fc.Arbitrary<unknown>,
  fields: readonly string[],
  account: fc.Arbitrary<ActingFor> = actingFor,
) {
  return fc
    .record({ path, auth, account, type: contentType, body: bodyFor(shaped, fields) })
    .map(({ path, auth, account, type, body }) => request({ method, path, auth, account, headers: type, body }));
}

/** Mostly none; a fresh one (a claim, then the send), a shared one (replay or mismatch), one that is empty or too long. */
const idempotencyKey = fc.oneof(
  { arbitrary: fc.constant(undefined), weight: 12 },
  { arbitrary: fc.uuid(), weight: 3 },
  { arbitrary: fc.constantFrom('k1', 'k2'), weight: 1 },
  { arbitrary: fc.string({ unit: 'grapheme-ascii', minLength: 1, maxLength: 64 }), weight: 1 },
  { arbitrary: fc.oneof(fc.constant(''), fc.string({ unit: 'grapheme-ascii', minLength: 250, maxLength: 300 })), weight: 1 },
);

/** POST /emails from `domain`, acting for `account` (whose domain it is). */
const sends = (world: FuzzWorld, domain: string, account: ActingFor) =>
  fc
    .record({ auth, type: contentType, key: idempotencyKey, body: bodyFor(sendRequest(domain, world.pendingDomain, world.suppressed), SEND_FIELDS) })
    .map(({ auth, type, key, body }) =>
      request({ method: 'POST', path: '/emails', auth, account, headers: { ...type, ...(key !== undefined ? { 'idempotency-key': key } : {}) }, body }),
    );

/** POST /templates/{name}/render with the variables that template takes. */
function templateRender(name: string) {
  const variables = Object.entries(TEMPLATES[name as keyof typeof TEMPLATES]!.variables);
  const shaped = fc.record(
    Object.fromEntries(variables.map(([v, def]) => [v, def.kind === 'url' ? fc.webUrl() : fc.oneof(fc.lorem({ maxCount: 3 }), oddString(40))])),
    { requiredKeys: variables.filter(([, def]) => def.required).map(([v]) => v) },
  );
  return withBody(
    'POST',
    fc.constant(`/templates/${name}/render`),
    shaped,
    variables.map(([v]) => v),
  );
}

/** A piece of Liquid source: plain text, the declared variable, odd text, or a fragment that does not parse. */
const liquidPart = fc.oneof(
  { arbitrary: fc.lorem({ maxCount: 6 }), weight: 3 },
  {
    arbitrary: fc.constantFrom(
      '<p>{{ n }}</p>',
      '<a href="{{ link }}">go</a>',
      '{% if n %}{{ n }}{% endif %}',
      '{% for i in (1..3) %}{{ i }}{% endfor %}',
      '<div>{{ content }}</div>',
      '{{ n',
      '{% if %}',
      '{{ undeclared }}',
      '{% include "x" %}',
      '{{ n | upcase | append: "x" }}',
      '<style>p { color: red }</style><p>{{ n }}</p>',
    ),
    weight: 4,
  },
  { arbitrary: oddString(60), weight: 2 },
);

/** A template's body as POST /templates and PUT take it: mostly well-shaped, each field present or not. */
function templateSource(layout: string) {
  return fc.record(
    {
      kind: fc.constantFrom('template', 'layout', 'Layout'),
      subject: liquidPart,
      html: liquidPart,
      text: liquidPart,
      layout: fc.oneof(fc.constant(layout), fc.constant(null), fc.constantFrom('nope', 'receipt', 'Brand'), oddString(20)),
      variables: fc.oneof(
        fc.constant({ n: { required: true }, link: { kind: 'url' } }),
        fc.dictionary(
          fc.oneof(fc.constantFrom('n', 'link', 'content'), oddString(12)),
          fc.record({ required: fc.oneof(fc.boolean(), fc.constant('yes')), kind: fc.constantFrom('text', 'url', 'number') }, { requiredKeys: [] }),
          { maxKeys: 4 },
        ),
      ),
    },
    { requiredKeys: ['subject'] },
  );
}

const SOURCE_FIELDS = ['name', 'kind', 'subject', 'html', 'text', 'layout', 'variables'];

/** A template name in a path: the fixtures, a built-in, a name nobody has, or odd text. */
function templateSegment(world: FuzzWorld) {
  return fc.oneof(
    { arbitrary: fc.constantFrom(world.templates.template, world.templates.layout, 'receipt'), weight: 4 },
    { arbitrary: fc.stringMatching(/^[a-z0-9][a-z0-9-]{0,12}$/), weight: 2 },
    { arbitrary: idSegment([]), weight: 2 },
  );
}

/** Every endpoint that takes a body, a query or an id, each with the requests it is fuzzed with. */
export function endpoints(world: FuzzWorld): { name: string; requests: fc.Arbitrary<FuzzRequest> }[] {
  const listQuery = { limit: limitValue, cursor: cursorValue(Object.values(world.cursors), { account: world.sub.id, row: world.ids.email }) };
  const subIds = [world.sub.id];
  const webhookIds = [world.webhooks.fixture];
  return [
    {
      name: 'POST /emails',
      // A send for the key's own account from its domain, or for the sub-account from the sub-account's domain.
      requests: fc.oneof({ arbitrary: sends(world, world.domain, 'self'), weight: 4 }, { arbitrary: sends(world, world.sub.domain, 'sub'), weight: 1 }),
    },
    {
      name: 'GET /emails',
      requests: get(
        query({ status: fc.constantFrom('sent', 'failed', 'sandboxed', 'SENT', 'queued'), since: sinceValue, ...listQuery }).map((q) => `/emails${q}`),
      ),
    },
    { name: 'GET /emails/{id}', requests: get(idSegment([world.ids.email]).map((id) => `/emails/${id}`)) },
    {
      name: 'GET /emails/{id}/message',
      requests: get(
        fc.tuple(idSegment([world.ids.email]), query({ recipient: fc.oneof(address, oddString(40)) })).map(([id, q]) => `/emails/${id}/message${q}`),
      ),
    },
    { name: 'GET /templates', requests: get(query(listQuery).map((q) => `/templates${q}`)) },
    {
      name: 'POST /templates',
      requests: withBody(
        'POST',
        fc.constant('/templates'),
        fc
          .tuple(
            fc.oneof(
              { arbitrary: fc.stringMatching(/^[a-z0-9][a-z0-9-]{0,20}$/), weight: 4 },
              { arbitrary: fc.constantFrom('receipt', world.templates.template, 'Order', '-x', 'a'.repeat(65)), weight: 1 },
              { arbitrary: oddString(20), weight: 1 },
            ),
            templateSource(world.templates.layout),
          )
          .map(([name, source]) => ({ name, ...source })),
        SOURCE_FIELDS,
      ),
    },
    {
      name: 'GET, PUT, DELETE and versions /templates/{name}',
      requests: fc.oneof(
        get(templateSegment(world).map((name) => `/templates/${name}`)),
        get(fc.tuple(templateSegment(world), query(listQuery)).map(([name, q]) => `/templates/${name}/versions${q}`)),
        withBody(
          'PUT',
          templateSegment(world).map((name) => `/templates/${name}`),
          templateSource(world.templates.layout),
          SOURCE_FIELDS,
        ),
        withBody(
          'DELETE',
          fc.oneof(fc.stringMatching(/^[a-z0-9][a-z0-9-]{0,20}$/), idSegment([])).map((name) => `/templates/${name}`),
          fc.constant({}),
          [],
        ),
      ),
    },
    {
      name: 'POST /templates/{name}/render',
      // Each template's own variables (the required ones present), or a name that is none.
      requests: fc.oneof(
        { arbitrary: fc.constantFrom(...Object.keys(TEMPLATES)).chain((name) => templateRender(name)), weight: 5 },
        {
          arbitrary: withBody(
            'POST',
            fc.constantFrom('nope', '%2e%2e', 'RECEIPT').map((name) => `/templates/${name}/render`),
            fc.constant({ total: '$1' }),
            ['total'],
          ),
          weight: 1,
        },
      ),
    },
    { name: 'GET /domains', requests: get(query(listQuery).map((q) => `/domains${q}`)) },
    {
      name: 'POST /domains',
      requests: withBody(
        'POST',
        fc.constant('/domains'),
        fc.record({
          name: fc.oneof(
            { arbitrary: fc.domain(), weight: 6 },
            {
              arbitrary: fc.constantFrom(
                'EXAMPLE.COM',
                'example.com.',
                'https://example.com/x',
                'b\u00fccher.example',
                'xn--bcher-kva.example',
                'localhost',
                '127.0.0.1',
                '[::1]',
                'a..b',
                '-a.com',
                `${'a'.repeat(64)}.com`,
                '%41.com',
                world.domain,
              ),
              weight: 2,
            },
            { arbitrary: oddString(30), weight: 1 },
          ),
        }),
        ['name'],
      ),
    },
    { name: 'GET /domains/{id}', requests: get(idSegment([world.ids.domain]).map((id) => `/domains/${id}`)) },
    {
      name: 'DELETE and verify /domains/{id}',
      requests: fc.oneof(
        withBody(
          'DELETE',
          idSegment([]).map((id) => `/domains/${id}`),
          fc.constant({}),
          [],
        ),
        withBody(
          'POST',
          idSegment([]).map((id) => `/domains/${id}/verify`),
          fc.constant({}),
          [],
        ),
      ),
    },
    { name: 'GET /account', requests: get(fc.constant('/account')) },
    { name: 'GET /accounts', requests: get(query(listQuery).map((q) => `/accounts${q}`)) },
    {
      name: 'POST /accounts',
      requests: withBody('POST', fc.constant('/accounts'), fc.record({ name: fc.oneof(fc.lorem({ maxCount: 4 }), oddString(90)) }), ['name']),
    },
    { name: 'GET /accounts/{id}', requests: get(idSegment(subIds).map((id) => `/accounts/${id}`)) },
    {
      name: 'POST /accounts/{id}/suspend',
      requests: withBody(
        'POST',
        idSegment(subIds, 12).map((id) => `/accounts/${id}/suspend`),
        fc.record({ suspended: fc.boolean(), reason: fc.oneof(fc.lorem({ mode: 'sentences', maxCount: 3 }), oddString(520)) }, { requiredKeys: ['suspended'] }),
        ['suspended', 'reason'],
        fc.oneof({ arbitrary: fc.constant('self' as const), weight: 6 }, { arbitrary: actingFor, weight: 1 }),
      ),
    },
    {
      name: 'DELETE /accounts/{id}',
      requests: withBody(
        'DELETE',
        idSegment([]).map((id) => `/accounts/${id}`),
        fc.constant({}),
        [],
      ),
    },
    { name: 'GET /keys', requests: get(query(listQuery).map((q) => `/keys${q}`)) },
    {
      name: 'POST /keys',
      requests: withBody(
        'POST',
        fc.constant('/keys'),
        fc.record({ name: fc.oneof(fc.lorem({ maxCount: 3 }), oddString(70)), scopes }, { requiredKeys: ['name'] }),
        ['name', 'scopes'],
      ),
    },
    {
      name: 'DELETE /keys/{id}',
      requests: withBody(
        'DELETE',
        idSegment([]).map((id) => `/keys/${id}`),
        fc.constant({}),
        [],
      ),
    },
    {
      name: 'GET /suppressions',
      requests: get(query({ address: fc.oneof(address, oddString(40), fc.constantFrom(...world.suppressed)), ...listQuery }).map((q) => `/suppressions${q}`)),
    },
    {
      name: 'POST /suppressions',
      requests: withBody('POST', fc.constant('/suppressions'), fc.record({ address: fc.oneof(address, fc.constantFrom(...world.suppressed), oddString(40)) }), [
        'address',
      ]),
    },
    {
      name: 'DELETE /suppressions/{address}',
      requests: withBody(
        'DELETE',
        fc
          .oneof(
            { arbitrary: fc.constantFrom(...world.suppressed), weight: 4 },
            { arbitrary: address.map((a) => pct(wtf8(a))), weight: 2 },
            { arbitrary: idSegment([world.ids.suppression]), weight: 2 },
          )
          .map((a) => `/suppressions/${a}`),
        fc.constant({}),
        [],
      ),
    },
    { name: 'GET /webhooks', requests: get(query(listQuery).map((q) => `/webhooks${q}`)) },
    {
      name: 'POST /webhooks',
      requests: withBody(
        'POST',
        fc.constant('/webhooks'),
        fc.record({ url: webhookUrl(world.webhooks.host, world.webhooks.port), events: eventList(WEBHOOK_EVENT_TYPES) }, { requiredKeys: ['url', 'events'] }),
        ['url', 'events'],
      ),
    },
    { name: 'GET /webhooks/{id}', requests: get(idSegment(webhookIds).map((id) => `/webhooks/${id}`)) },
    {
      name: 'DELETE /webhooks/{id}',
      requests: withBody(
        'DELETE',
        idSegment(world.webhooks.deletable).map((id) => `/webhooks/${id}`),
        fc.constant({}),
        [],
      ),
    },
    {
      name: 'POST /webhooks/{id}/test',
      // Only the fixture endpoint (the receiver on loopback) is a real id here: no other endpoint is ever pinged.
      requests: withBody(
        'POST',
        idSegment(webhookIds, 8).map((id) => `/webhooks/${id}/test`),
        fc.constant({}),
        [],
        fc.oneof({ arbitrary: fc.constant('self' as const), weight: 8 }, { arbitrary: actingFor, weight: 1 }),
      ),
    },
    {
      name: 'GET /webhooks/{id}/deliveries',
      requests: get(fc.tuple(idSegment(webhookIds, 6), query(listQuery)).map(([id, q]) => `/webhooks/${id}/deliveries${q}`)),
    },
    {
      name: 'POST /webhooks/{id}/replay',
      requests: withBody(
        'POST',
        idSegment(webhookIds, 14).map((id) => `/webhooks/${id}/replay`),
        replayBody(world.eventTimes),
        ['since', 'until', 'events'],
      ),
    },
    {
      name: 'GET /events',
      requests: get(
        query({
          since: eventTime(world.eventTimes),
          type: fc.constantFrom(...EMAIL_EVENT_TYPES, 'ping', 'EMAIL.DELIVERED', 'delivered', 'email.sent'),
          ...listQuery,
        }).map((q) => `/events${q}`),
      ),
    },
    { name: 'GET /database', requests: get(fc.constant('/database')) },
    { name: 'POST /database', requests: withBody('POST', fc.constant('/database'), fc.record({ url: databaseUrl(world.database) }), ['url']) },
    { name: 'POST /database/test', requests: withBody('POST', fc.constant('/database/test'), fc.constant({}), []) },
    { name: 'DELETE /database', requests: withBody('DELETE', fc.constant('/database'), fc.constant({}), []) },
    {
      name: 'methods not served on known paths',
      requests: fc
        .record({
          method: fc.constantFrom('PUT', 'PATCH', 'OPTIONS', 'DELETE', 'POST', 'GET'),
          path: fc.constantFrom(
            '/emails',
            '/emails/x',
            '/domains',
            '/domains/x/verify',
            '/account',
            '/accounts',
            '/accounts/x/suspend',
            '/keys',
            '/keys/x',
            '/suppressions',
            '/suppressions/x',
            '/webhooks',
            '/webhooks/x',
            '/webhooks/x/test',
            '/webhooks/x/deliveries',
            '/webhooks/x/replay',
            '/events',
            '/database',
            '/database/test',
            '/',
            '',
          ),
        })
        .chain(({ method, path }) =>
          method === 'GET' ? get(fc.constant(path)) : withBody(method, fc.constant(path), fc.record({ name: fc.string() }), ['name']),
        ),
    },
  ];
}
