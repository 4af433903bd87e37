import { accessSync, constants, statSync } from 'node:fs';
import { isIP } from 'node:net';
import { hostname } from 'node:os';
import { z } from 'zod';
import { type StateTarget, parseStateUrl } from './state-url.js';
import { NO_TRUSTED_PROXIES, type TrustedProxies, parseTrustedProxies } from './trusted-proxies.js';

/**
 * The one place that reads the environment. Every variable of the operator contract
 * (docs/api/decisions.md section 1) plus the two rate limits is declared here, described, parsed once at start.
 */

/** A port. `min` is 1 for a port the server connects to: 0 means something only to a listener (any free port, or off). */
const port = (d: number, min: 0 | 1 = 0) =>
  z
    .string()
    .default(String(d))
    .transform((v, ctx) => {
      const n = Number(v);
      if (!/^\d+$/.test(v.trim()) || n < min || n > 65535) {
        ctx.addIssue({ code: 'custom', message: `must be a port number ${min}-65535, got "${v}"` });
        return z.NEVER;
      }
      return n;
    });

const positiveInt = (d: number, min = 1, max = Number.MAX_SAFE_INTEGER) =>
  z
    .string()
    .default(String(d))
    .transform((v, ctx) => {
      const n = Number(v);
      if (!/^\d+$/.test(v.trim()) || !Number.isSafeInteger(n) || n < min || n > max) {
        ctx.addIssue({ code: 'custom', message: `must be an integer from ${min} to ${max}, got "${v}"` });
        return z.NEVER;
      }
      return n;
    });

/** The longest timer Node keeps (a longer one fires after 1 ms). */
const MAX_TIMER_MS = 2_147_483_647;
/** Days a date may lie ahead (a trial, a grace window): a hundred years stays a date JavaScript can hold. */
const MAX_DAYS = 36_500;

/** A secret given in the environment: no whitespace (a trailing newline from a mounted file would never match). */
const token = z.string().min(16, 'must be at least 16 characters').regex(/^\S+$/, 'must not contain whitespace (a trailing newline from a file?)');

const bool = (d: boolean) =>
  z
    .string()
    .default(String(d))
    .transform((v, ctx) => {
      const s = v.trim().toLowerCase();
      if (['1', 'true', 'yes', 'on'].includes(s)) return true;
      if (['0', 'false', 'no', 'off', ''].includes(s)) return false;
      ctx.addIssue({ code: 'custom', message: `must be true or false, got "${v}"` });
      return z.NEVER;
    });

const HOST_NAME = /^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/;
/** A domain name that need not be a host's: labels may hold `_` (an SPF include target such as `_spf.example.com`). */
const DOMAIN_NAME = /^(?=.{1,253}$)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9])?)(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9])?)*$/;

/** A name matching `pattern` once trimmed and lower-cased; refused naming the value, as every other variable is. */
const nameMatching = (pattern: RegExp, what: string) =>
  z.string().transform((v, ctx) => {
    const s = v.trim().toLowerCase();
    if (pattern.test(s)) return s;
    ctx.addIssue({
      code: 'custom',
      message: `must be ${what} (letters, digits and hyphens in dot-separated labels of at most 63, no trailing dot), got "${v}"`,
    });
    return z.NEVER;
  });
const hostName = nameMatching(HOST_NAME, 'a host name');

/**
 * The mailbox providers whose feedback loops send ARF complaints (RFC 6449), each signing them with DKIM for its
 * domain: the default trusted FBL_REPORTERS. An operator enrolled with others names them.
 */
export const DEFAULT_FBL_REPORTERS = [
  'yahoo.com',
  'aol.com',
  'hotmail.com',
  'outlook.com',
  'comcast.net',
  'fastmail.com',
  'messagingengine.com',
  'zoho.com',
  'mail.ru',
  'yandex.ru',
  'yandex.net',
  'gmx.net',
  'web.de',
  'seznam.cz',
  'emailsrvr.com',
  'returnpath.net',
] as const;

/** A comma list of domain names, lower-cased; empty: none. */
const domainList = z.string().transform((v, ctx) => {
  const names = v
    .split(',')
    .map((n) => n.trim().toLowerCase())
    .filter(Boolean);
  const bad = names.find((n) => !DOMAIN_NAME.test(n));
  if (bad === undefined) return names;
  ctx.addIssue({ code: 'custom', message: `must be a comma list of domain names, got "${bad}"` });
  return z.NEVER;
});
const domainName = nameMatching(DOMAIN_NAME, 'a domain name (labels may also hold _)');

/** MAIL_HOSTNAME when unset: the machine's name, or `localhost` when that is no host name (`My_Box`); the start warns. */
export function defaultMailHostname(machine: string = hostname()): string {
  const name = machine.trim().toLowerCase();
  return HOST_NAME.test(name) ? name : 'localhost';
}

/** A listening address: an IPv4 or IPv6 address, or `localhost`; a name would be resolved, and could move. */
const listenAddress = (d: string) =>
  z
    .string()
    .default(d)
    .transform((v, ctx) => {
      const s = v.trim();
      if (isIP(s) !== 0 || s.toLowerCase() === 'localhost') return s;
      ctx.addIssue({ code: 'custom', message: `must be an IP address or localhost, got "${v}"` });
      return z.NEVER;
    });

function isReadableFile(path: string): boolean {
  try {
    accessSync(path, constants.R_OK);
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

/** A resolver address: `ip` or `ip:port`, IPv6 as `[ip]:port` or bare. */
export interface DnsServer {
  host: string;
  port: number;
}

function parseDnsServer(entry: string): DnsServer | null {
  const s = entry.trim();
  const bare = s.replace(/^\[(.*)\]$/, '$1');
  if (isIP(bare) && (bare === s || isIP(bare) === 6)) return { host: bare, port: 53 };
  const withPort = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(s);
  if (!withPort) return null;
  const host = withPort[1] ?? withPort[2]!;
  const port = Number(withPort[3]);
  // An IPv6 address with a port is written in brackets; an IPv4 one without.
  const family = withPort[1] !== undefined ? 6 : 4;
  if (isIP(host) !== family || port < 1 || port > 65535) return null;
  return { host, port };
}

const LOG_LEVELS = ['debug', 'info', 'warn', 'error'] as const;

/**
 * A node's name: what a lease holder's id starts with (`<node>:<pid>:<random>`), so never a colon; at most 48
 * characters, so `mailstead:<node>` fits Postgres's 63 of an application_name (db/pg/node-link.ts).
 */
const NODE_NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,47}$/;

/** The machine's host name as a node name: its characters outside NODE_NAME's replaced, `node` when none is left. */
export function defaultNodeName(machine: string = hostname()): string {
  const name = machine
    .replace(/[^A-Za-z0-9._-]/g, '-')
    .replace(/^[^A-Za-z0-9]+/, '')
    .slice(0, 48);
  return name === '' ? 'node' : name;
}

/** How outbound mail leaves: `direct` (MX, or the relay) in production; `capture` keeps it on this machine. */
export const DELIVERY_MODES = ['direct', 'capture'] as const;
export type DeliveryMode = (typeof DELIVERY_MODES)[number];

export const configSchema = z.object({
  DATA_DIR: z
    .string()
    .regex(/\S/, 'must not be empty or blank')
    .default('./data')
    .describe('SQLite database, generated secret key and STARTTLS pair, inbound spool; with STATE_URL only the lock file (no state)'),
  STATE_URL: z
    .string()
    .optional()
    .describe(
      "The service's own state on Postgres 13 or newer instead of SQLite in DATA_DIR: `postgresql://user:password@host:port/database`. TLS is verified (`sslmode=verify-full`, the default; `sslrootcert=/path/ca.pem` names a CA) unless `sslmode=no-verify`; `sslmode=disable` only for a loopback host. SECRET_KEY must then be given, and SMTP_TLS_CERT and SMTP_TLS_KEY when SMTP listens",
    ),
  NODE_NAME: z
    .string()
    .regex(NODE_NAME_PATTERN, 'must be 1 to 48 letters, digits, dots, hyphens or underscores, starting with a letter or digit')
    .optional()
    .describe(
      "This node's name in leases, logs and `/metrics`; with STATE_URL, unique among the nodes sharing it (a second node of the same name waits for the first to stop)",
    ),
  DRAIN_SECONDS: z
    .string()
    .regex(/^\s*\d{1,3}\s*$/, 'must be a whole number of seconds from 0 to 600')
    .refine((v) => Number(v) <= 600, 'must be a whole number of seconds from 0 to 600')
    .optional()
    .describe(
      'How long a stopping node keeps taking requests after `/healthz` turns 503 (`draining`), so a load balancer takes it out first; its workers stop claiming at once and finish what they hold meanwhile',
    ),
  HTTP_HOST: listenAddress('0.0.0.0').describe('Address the HTTP API, dashboard and /healthz listen on'),
  HTTP_PORT: port(8080).describe('Port of the HTTP API (`/api/v1`), the dashboard (`/dashboard`) and `GET /healthz`'),
  SMTP_HOST: listenAddress('0.0.0.0').describe('Address inbound SMTP listens on'),
  SMTP_PORT: port(25).describe('Inbound SMTP port; `0` turns inbound off'),
  // The machine's name when unset, judged like a given one (a zod default skips the checks).
  MAIL_HOSTNAME: hostName
    .optional()
    .describe(
      'Banner and EHLO name, MX target, bounce (VERP) domain. Production must set it to a public fully qualified name (a warning at start says when it is not)',
    ),
  SMTP_TLS_CERT: z
    .string()
    .min(1)
    .optional()
    .describe('PEM certificate file for STARTTLS on inbound SMTP and submission; required with STATE_URL when SMTP listens'),
  SMTP_TLS_KEY: z.string().min(1).optional().describe('PEM private key file matching SMTP_TLS_CERT'),
  SMTP_MAX_MESSAGE_BYTES: positiveInt(26214400).describe('Largest inbound message, advertised in SIZE and enforced with 552'),
  SUBMISSION_PORT: port(587).describe('SMTP submission with STARTTLS (an API key as the password), on SMTP_HOST; `0` turns it off'),
  SUBMISSIONS_PORT: port(465).describe('SMTP submission over implicit TLS, on SMTP_HOST; `0` turns it off'),
  SUBMISSION_MAX_MESSAGE_BYTES: positiveInt(10485760).describe('Largest submitted message, advertised in SIZE and enforced with 552'),
  SMTP_PROXY_PROTOCOL: bool(false).describe(
    'Every connection to SMTP_PORT, SUBMISSION_PORT and SUBMISSIONS_PORT must open with a PROXY protocol header, v1 or v2 (HAProxy `send-proxy-v2`); its client address is the one checked, limited and logged. A connection without one is closed. Only behind a load balancer that sends it',
  ),
  SPF_DOMAIN: domainName.optional().describe('What customers `include:` in their SPF record: a domain name (`_spf.example.com` is one)'),
  FBL_REPORTERS: domainList
    .optional()
    .describe(
      `Comma list of the domains whose DKIM-signed ARF complaints are acted on (a signing domain counts for itself and its subdomains); empty: none. Unset: ${DEFAULT_FBL_REPORTERS.join(', ')}`,
    ),
  SECRET_KEY: z
    .string()
    .optional()
    .describe('32 bytes, hex or base64; encrypts DKIM keys, webhook secrets and database URLs. `off`: the server cannot store secrets'),
  DNS_SERVERS: z
    .string()
    .optional()
    .describe(
      'Comma list of `ip` or `ip:port` resolvers for domain checks and MX lookups; an IPv6 resolver with a port is bracketed, `[::1]:5353` (`::1:53` is an address, port 53)',
    ),
  DELIVERY_MODE: z
    .enum(DELIVERY_MODES, { error: (issue) => `must be direct or capture, got "${String(issue.input)}"` })
    .default('direct')
    .describe(
      "`direct`: mail goes to each recipient's MX (or SMTP_RELAY_URL when set). `capture`: nothing leaves the machine; each recipient's signed message is kept in DATA_DIR (the newest 10,000) and recorded as delivered, and `.test`, `.example`, `.invalid` and `.localhost` domains verify without DNS (development only)",
    ),
  SMTP_DELIVERY_PORT: port(25, 1).describe('Port used to reach recipient MX hosts'),
  SMTP_RELAY_URL: z
    .string()
    .optional()
    .describe(
      'Optional smarthost, `smtp://` or `smtps://user:pass@host:port` (port 587, or 465 for smtps, when none; nothing after the port); when set all outbound mail goes through it',
    ),
  TRUST_PROXY: z
    .string()
    .optional()
    .describe(
      'Comma list of addresses or CIDRs (IPv4 or IPv6: `10.0.0.5, 10.1.0.0/16, fd00::/8`) of the proxies in front of HTTP_PORT: a request from one of them is taken to come from the address its `X-Forwarded-For` names (the rightmost one not in the list). Empty: the TCP peer, and the header is ignored',
    ),
  ALLOW_PRIVATE_TARGETS: bool(false).describe('Allow webhook, database and MX targets on loopback/private addresses (development and tests only)'),
  WEBHOOK_INTERVAL_MS: positiveInt(60000, 1, MAX_TIMER_MS).describe('Webhook dispatcher period in milliseconds (at most 2147483647)'),
  ADMIN_TOKEN: token.optional().describe('Dashboard sign-in token, at least 16 characters, no whitespace (only its hash is stored)'),
  METRICS_TOKEN: token
    .optional()
    .describe(
      'When set (at least 16 characters, no whitespace), `GET /metrics` answers only `Authorization: Bearer <METRICS_TOKEN>` (401 otherwise); unset, it is open',
    ),
  DEFAULT_DAILY_QUOTA: positiveInt(10000).describe('Daily quota (recipients) of a new account or sub-account'),
  TRIAL_DAYS: positiveInt(14, 0, MAX_DAYS).describe('Length of the free trial of a new top-level account, in days (0 to 36500)'),
  GRACE_DAYS: positiveInt(3, 0, MAX_DAYS).describe('Days of the grace window after credits run out (0 to 36500)'),
  GRACE_EMAILS: positiveInt(100, 0).describe('Sends allowed in the grace window after credits run out'),
  RATE_LIMIT_PER_KEY: positiveInt(60).describe('API requests per minute allowed for one key'),
  RATE_LIMIT_PER_ACCOUNT: positiveInt(600).describe('API requests per minute allowed across all keys of one account'),
  LOG_LEVEL: z
    .enum(LOG_LEVELS, { error: `must be one of ${LOG_LEVELS.join(', ')} (lower case)` })
    .default('info')
    .describe('Structured JSON logs on stdout: debug, info, warn or error (lower case)'),
});

type RawConfig = z.output<typeof configSchema>;

export type LogLevel = (typeof LOG_LEVELS)[number];

export interface Config {
  dataDir: string;
  /** NODE_NAME (docs/api/decisions.md section 12): this node among those sharing STATE_URL. */
  nodeName: string;
  /** DRAIN_SECONDS in ms: how long a stop keeps the listeners open after /healthz turns 503 (server/app/serve.ts). */
  drainMs: number;
  httpHost: string;
  httpPort: number;
  smtpHost: string;
  smtpPort: number;
  mailHostname: string;
  smtpTlsCert: string | null;
  smtpTlsKey: string | null;
  smtpMaxMessageBytes: number;
  /** SMTP submission (docs/api/decisions.md section 10): STARTTLS and implicit-TLS ports, 0 for off. */
  submissionPort: number;
  submissionsPort: number;
  submissionMaxMessageBytes: number;
  /** SMTP_PROXY_PROTOCOL: each SMTP connection opens with a PROXY header naming the client (docs/api/decisions.md section 12). */
  smtpProxyProtocol: boolean;
  /** TRUST_PROXY: the peers whose X-Forwarded-For names the HTTP client. */
  trustProxy: TrustedProxies;
  spfDomain: string;
  /** Domains whose DKIM signature makes a feedback-loop complaint trusted (docs/api/decisions.md section 13). */
  fblReporters: readonly string[];
  /** Unset (generate or read DATA_DIR/secret.key), 'off', or the decoded 32 bytes. */
  secretKey: { mode: 'file' } | { mode: 'off' } | { mode: 'given'; key: Buffer };
  /** Where the service's own state lives: SQLite in DATA_DIR (the default), or the Postgres STATE_URL names. */
  state: { engine: 'sqlite' } | { engine: 'postgres'; target: StateTarget };
  dnsServers: DnsServer[] | null;
  /** `capture`: no outbound connection is ever opened; messages are kept in the capture store. */
  deliveryMode: DeliveryMode;
  smtpDeliveryPort: number;
  smtpRelayUrl: URL | null;
  allowPrivateTargets: boolean;
  webhookIntervalMs: number;
  adminToken: string | null;
  /** The Bearer token GET /metrics requires; null: /metrics is open. */
  metricsToken: string | null;
  defaultDailyQuota: number;
  trialDays: number;
  graceDays: number;
  graceEmails: number;
  rateLimitPerKey: number;
  rateLimitPerAccount: number;
  logLevel: LogLevel;
}

export class ConfigError extends Error {
  override name = 'ConfigError';
}

function decodeSecretKey(v: string): Buffer | null {
  const s = v.trim();
  if (/^[0-9a-fA-F]{64}$/.test(s)) return Buffer.from(s, 'hex');
  if (/^[A-Za-z0-9+/_-]{43}=?$/.test(s)) {
    const b = Buffer.from(s.replace(/-/g, '+').replace(/_/g, '/'), 'base64');
    if (b.length === 32) return b;
  }
  return null;
}

/**
 * Parses the environment once. Every problem is collected; the thrown ConfigError's message is one line
 * naming each failing variable.
 */
export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  // Empty strings mean "unset", as in most container runtimes.
  const input: Record<string, string> = {};
  for (const key of Object.keys(configSchema.shape)) {
    const v = env[key];
    if (v !== undefined && v !== '') input[key] = v;
  }
  const parsed = configSchema.safeParse(input);
  const problems: string[] = [];
  if (!parsed.success) {
    for (const issue of parsed.error.issues) problems.push(`${String(issue.path[0] ?? '?')} ${issue.message}`);
  }
  const raw = parsed.success ? parsed.data : null;

  // These read the input itself, so their problems are listed even when another variable failed the schema.
  let secretKey: Config['secretKey'] = { mode: 'file' };
  if (input.SECRET_KEY !== undefined) {
    if (input.SECRET_KEY.trim().toLowerCase() === 'off') secretKey = { mode: 'off' };
    else {
      const key = decodeSecretKey(input.SECRET_KEY);
      if (key) secretKey = { mode: 'given', key };
      else problems.push('SECRET_KEY must be 32 bytes as 64 hex characters or base64, or "off"');
    }
  }

  let state: Config['state'] = { engine: 'sqlite' };
  if (input.STATE_URL !== undefined) {
    try {
      state = { engine: 'postgres', target: parseStateUrl(input.STATE_URL) };
    } catch (err) {
      problems.push(`STATE_URL ${err instanceof Error ? err.message : String(err)}`);
    }
    // The key cannot be generated into DATA_DIR, which holds no state then: every node must be given the same one.
    if (input.SECRET_KEY === undefined) problems.push('SECRET_KEY must be given when STATE_URL is set (32 bytes as hex or base64, or "off")');
  }

  let dnsServers: DnsServer[] | null = null;
  if (input.DNS_SERVERS !== undefined) {
    const entries = input.DNS_SERVERS.split(',')
      .map((s) => s.trim())
      .filter(Boolean);
    const servers = entries.map(parseDnsServer);
    const bad = entries.find((_, i) => servers[i] === null);
    if (bad !== undefined || entries.length === 0) problems.push(`DNS_SERVERS must be a comma list of ip or ip:port, got "${bad ?? input.DNS_SERVERS}"`);
    else dnsServers = servers as DnsServer[];
  }

  let smtpRelayUrl: URL | null = null;
  if (input.SMTP_RELAY_URL !== undefined) {
    try {
      const u = new URL(input.SMTP_RELAY_URL);
      if ((u.protocol !== 'smtp:' && u.protocol !== 'smtps:') || !u.hostname) throw new Error('scheme');
      // Nothing the relay would ignore, and a port something can listen on.
      if (u.port === '0' || (u.pathname !== '' && u.pathname !== '/') || u.search !== '' || u.hash !== '') throw new Error('form');
      // The credentials are percent-decoded at delivery: a malformed escape must stop the start, not every delivery.
      decodeURIComponent(u.username);
      decodeURIComponent(u.password);
      smtpRelayUrl = u;
    } catch {
      problems.push(
        'SMTP_RELAY_URL must be smtp:// or smtps:// with a host and an optional port (1 to 65535; 587, or 465 for smtps, when none), nothing after it, its credentials percent-encoded',
      );
    }
  }

  let trustProxy = NO_TRUSTED_PROXIES;
  if (input.TRUST_PROXY !== undefined) {
    const parsed = parseTrustedProxies(input.TRUST_PROXY);
    if (parsed.ok) trustProxy = parsed.proxies;
    else problems.push(`TRUST_PROXY must be a comma list of IP addresses or CIDRs (10.0.0.0/8, 2001:db8::/32), got "${parsed.bad}"`);
  }

  if ((input.SMTP_TLS_CERT === undefined) !== (input.SMTP_TLS_KEY === undefined)) {
    problems.push('SMTP_TLS_CERT and SMTP_TLS_KEY must be set together');
  }
  for (const name of ['SMTP_TLS_CERT', 'SMTP_TLS_KEY'] as const) {
    const path = input[name];
    if (path !== undefined && !isReadableFile(path)) problems.push(`${name} must be a readable file, got "${path}"`);
  }
  // Nor can the STARTTLS pair be generated into DATA_DIR then: every node must be given it (and the same name on each).
  if (input.STATE_URL !== undefined && input.SMTP_TLS_CERT === undefined && input.SMTP_TLS_KEY === undefined && smtpListens(raw, input)) {
    problems.push('SMTP_TLS_CERT and SMTP_TLS_KEY must be given when STATE_URL is set and SMTP listens (SMTP_PORT, SUBMISSION_PORT or SUBMISSIONS_PORT not 0)');
  }

  if (problems.length > 0 || !raw) throw new ConfigError(`invalid configuration: ${problems.join('; ')}`);
  return toConfig(raw, { secretKey, state, dnsServers, smtpRelayUrl, trustProxy });
}

/** Whether inbound SMTP or submission listens: a port not 0 (unset, the defaults listen). */
function smtpListens(raw: RawConfig | null, input: Record<string, string>): boolean {
  if (raw) return raw.SMTP_PORT !== 0 || raw.SUBMISSION_PORT !== 0 || raw.SUBMISSIONS_PORT !== 0;
  return (['SMTP_PORT', 'SUBMISSION_PORT', 'SUBMISSIONS_PORT'] as const).some((name) => input[name] === undefined || Number(input[name]) !== 0);
}

function toConfig(raw: RawConfig, read: Pick<Config, 'secretKey' | 'state' | 'dnsServers' | 'smtpRelayUrl' | 'trustProxy'>): Config {
  const { secretKey, state, dnsServers, smtpRelayUrl, trustProxy } = read;
  return {
    dataDir: raw.DATA_DIR,
    nodeName: raw.NODE_NAME ?? defaultNodeName(),
    // Several nodes sit behind a balancer (STATE_URL): 5 s, past HAProxy's `inter 1s fall 2`; one node, none.
    drainMs: raw.DRAIN_SECONDS !== undefined ? Number(raw.DRAIN_SECONDS) * 1000 : state.engine === 'postgres' ? 5000 : 0,
    httpHost: raw.HTTP_HOST,
    httpPort: raw.HTTP_PORT,
    smtpHost: raw.SMTP_HOST,
    smtpPort: raw.SMTP_PORT,
    mailHostname: raw.MAIL_HOSTNAME ?? defaultMailHostname(),
    smtpTlsCert: raw.SMTP_TLS_CERT ?? null,
    smtpTlsKey: raw.SMTP_TLS_KEY ?? null,
    smtpMaxMessageBytes: raw.SMTP_MAX_MESSAGE_BYTES,
    submissionPort: raw.SUBMISSION_PORT,
    submissionsPort: raw.SUBMISSIONS_PORT,
    submissionMaxMessageBytes: raw.SUBMISSION_MAX_MESSAGE_BYTES,
    smtpProxyProtocol: raw.SMTP_PROXY_PROTOCOL,
    trustProxy,
    spfDomain: raw.SPF_DOMAIN ?? raw.MAIL_HOSTNAME ?? defaultMailHostname(),
    fblReporters: raw.FBL_REPORTERS ?? DEFAULT_FBL_REPORTERS,
    secretKey,
    state,
    dnsServers,
    deliveryMode: raw.DELIVERY_MODE,
    smtpDeliveryPort: raw.SMTP_DELIVERY_PORT,
    smtpRelayUrl,
    allowPrivateTargets: raw.ALLOW_PRIVATE_TARGETS,
    webhookIntervalMs: raw.WEBHOOK_INTERVAL_MS,
    adminToken: raw.ADMIN_TOKEN ?? null,
    metricsToken: raw.METRICS_TOKEN ?? null,
    defaultDailyQuota: raw.DEFAULT_DAILY_QUOTA,
    trialDays: raw.TRIAL_DAYS,
    graceDays: raw.GRACE_DAYS,
    graceEmails: raw.GRACE_EMAILS,
    rateLimitPerKey: raw.RATE_LIMIT_PER_KEY,
    rateLimitPerAccount: raw.RATE_LIMIT_PER_ACCOUNT,
    logLevel: raw.LOG_LEVEL,
  };
}

/**
 * Suffixes that are never a public name (RFC 6761 special-use names, mDNS, and the usual distribution defaults):
 * records asking customers to `include:` such a host, or bounces sent to it, cannot work.
 */
const NON_PUBLIC_SUFFIXES = ['localhost', 'localdomain', 'local', 'internal', 'lan', 'home.arpa', 'test', 'example', 'invalid'];

/**
 * Why MAIL_HOSTNAME is not a fully qualified public name (a short name such as the default `vm`, `localhost`, a
 * special-use suffix, a numeric last label), or null when it looks like one. main warns at start; it does not refuse,
 * so development runs as is.
 */
export function mailHostnameProblem(name: string): string | null {
  const labels = name.split('.');
  const last = labels[labels.length - 1] ?? '';
  if (labels.length < 2) return `MAIL_HOSTNAME "${name}" is not a fully qualified name`;
  if (/^\d+$/.test(last)) return `MAIL_HOSTNAME "${name}" is not a host name (its last label is numeric)`;
  const suffix = NON_PUBLIC_SUFFIXES.find((s) => name === s || name.endsWith(`.${s}`));
  if (suffix !== undefined) return `MAIL_HOSTNAME "${name}" ends in .${suffix}, which is never a public name`;
  return null;
}

/** Rows of the configuration table of docs/operating/configuration.md, straight from the schema. */
export function describeConfig(): { name: string; default: string; meaning: string }[] {
  const defaults: Record<string, string> = {
    MAIL_HOSTNAME: "the machine's hostname (`localhost` when that is not a host name)",
    SPF_DOMAIN: 'MAIL_HOSTNAME',
    NODE_NAME: "the machine's host name",
    DRAIN_SECONDS: '`5` with STATE_URL, else `0`',
    FBL_REPORTERS: 'the feedback loops named in the meaning',
    SECRET_KEY: 'generated into `DATA_DIR/secret.key`',
    SMTP_TLS_CERT: 'generated self-signed pair',
    SMTP_TLS_KEY: 'generated self-signed pair',
    DNS_SERVERS: "the system's",
    ADMIN_TOKEN: 'generated on first start, printed once',
    SMTP_RELAY_URL: 'unset',
    STATE_URL: 'unset (SQLite in `DATA_DIR`)',
    TRUST_PROXY: 'empty (no proxy trusted)',
  };
  return Object.entries(configSchema.shape).map(([name, schema]) => {
    let dflt = defaults[name];
    if (dflt === undefined) {
      const r = schema.safeParse(undefined);
      dflt = r.success && r.data !== undefined ? `\`${String(r.data)}\`` : 'unset';
    }
    return { name, default: dflt, meaning: schema.description ?? '' };
  });
}
