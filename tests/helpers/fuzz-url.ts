import fc from 'fast-check';
import { badUtf8, oddString, oddUnit } from './fuzz-json.js';

/**
 * URL parts for the API fuzz test: path ids, query strings and their values, percent-encoded properly (lone
 * surrogates as the bytes they would be), as bytes that are not UTF-8, with broken escapes, or long past node's
 * header limit.
 */

/** UTF-8 bytes of a string, with a lone surrogate written as its three bytes (which are not UTF-8). */
export function wtf8(s: string): number[] {
  const out: number[] = [];
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    const pair = c >= 0xd800 && c <= 0xdbff && i + 1 < s.length && s.charCodeAt(i + 1) >= 0xdc00 && s.charCodeAt(i + 1) <= 0xdfff;
    if (pair) {
      out.push(...Buffer.from(s.slice(i, i + 2), 'utf8'));
      i++;
    } else if (c >= 0xd800 && c <= 0xdfff) out.push(0xe0 | (c >> 12), 0x80 | ((c >> 6) & 0x3f), 0x80 | (c & 0x3f));
    else out.push(...Buffer.from(s[i]!, 'utf8'));
  }
  return out;
}

const unreserved = (b: number) => /[A-Za-z0-9._~-]/.test(String.fromCharCode(b));
export const pct = (bytes: number[]) =>
  bytes.map((b) => (unreserved(b) ? String.fromCharCode(b) : `%${b.toString(16).toUpperCase().padStart(2, '0')}`)).join('');

/** Percent-encoding gone wrong: a lone `%`, bad hex, a cut sequence, an overlong NUL, a surrogate, bytes that are not UTF-8. */
const badEncoding = fc.constantFrom('%', '%zz', '%E0%A4%A', '%00', '%C0%80', '%ED%A0%80', '%FF', '%FE%FF', '+', '%2B', '%25', '%u0041');

/** A string as it goes into a URL: encoded properly, as raw bytes that are not UTF-8, or with broken escapes. */
const urlText = (text: fc.Arbitrary<string>): fc.Arbitrary<string> =>
  fc.oneof(
    { arbitrary: text.map((s) => pct(wtf8(s))), weight: 6 },
    {
      arbitrary: fc
        .array(fc.oneof(badUtf8, fc.array(fc.integer({ min: 0, max: 255 }), { maxLength: 6 })), { minLength: 1, maxLength: 4 })
        .map((parts) => pct(parts.flat())),
      weight: 1,
    },
    { arbitrary: fc.tuple(text, badEncoding, text).map(([a, bad, b]) => `${pct(wtf8(a))}${bad}${pct(wtf8(b))}`), weight: 1 },
  );

/** Long URL text: up to about 20 KB, past node's header limit (16 KB), which must still answer in the envelope. */
const longUrlText = fc.record({ unit: fc.oneof(fc.constant('a'), oddUnit), bytes: fc.integer({ min: 500, max: 20_000 }) }).map(({ unit, bytes }) => {
  const one = pct(wtf8(unit));
  return one.repeat(Math.max(1, Math.floor(bytes / one.length)));
});

/** A known id changed in one character, cased, padded or cut. */
const nearId = (id: string) =>
  fc.oneof(
    fc.nat({ max: id.length - 1 }).map((i) => `${id.slice(0, i)}${id[i] === 'f' ? '0' : 'f'}${id.slice(i + 1)}`),
    fc.constantFrom(id.toUpperCase(), `${id} `, ` ${id}`, id.slice(0, -1), `${id}0`, `${id}%00`, `${id}%0A`),
  );

/** A path segment for `{id}`: a real id only when `real` holds some (never for deletes that would break the fixture). */
export function idSegment(real: string[], realWeight = 3): fc.Arbitrary<string> {
  const anyId = real.length > 0 ? fc.constantFrom(...real) : fc.uuid();
  return fc.oneof(
    ...(real.length > 0 ? [{ arbitrary: fc.constantFrom(...real), weight: realWeight }] : []),
    { arbitrary: anyId.chain(nearId), weight: 3 },
    { arbitrary: fc.uuid(), weight: 2 },
    { arbitrary: urlText(oddString(40, 1)), weight: 4 },
    {
      arbitrary: fc.constantFrom('..', '.', '%2e%2e', '%2F', '%2f..%2f', '%00', 'null', 'undefined', '__proto__', 'constructor', '0', '-1', '1e308'),
      weight: 2,
    },
    { arbitrary: longUrlText, weight: 1 },
  );
}

export const limitValue = fc.oneof(
  { arbitrary: fc.integer({ min: 1, max: 100 }).map(String), weight: 4 },
  { arbitrary: fc.constantFrom('0', '101', '-1', '1e2', '1.5', '007', '100 ', ' 1', '0x10', '', '99999999999999999999', 'NaN', '\uff11', '1,2'), weight: 3 },
);

/**
 * Cursors: live ones from every list (the right list or a wrong one), live ones with one character changed, forged
 * ones naming a real account and row (with a made-up signature), odd text.
 */
export function cursorValue(live: string[], real: { account: string; row: string }): fc.Arbitrary<string> {
  const forged = fc
    .record({
      l: fc.constantFrom('emails', 'domains', 'accounts', 'keys', 'suppressions', 'webhooks', 'webhook-deliveries', 'events', '__proto__'),
      a: fc.constantFrom(real.account, 'x'),
      k: fc.constantFrom(real.row, ''),
    })
    .map((body) => `${Buffer.from(JSON.stringify(body)).toString('base64url')}.${'A'.repeat(22)}`);
  return fc.oneof(
    { arbitrary: fc.constantFrom(...live), weight: 4 },
    { arbitrary: fc.constantFrom(...live).chain(nearId), weight: 3 },
    { arbitrary: forged, weight: 2 },
    { arbitrary: oddString(60), weight: 2 },
    { arbitrary: fc.constantFrom('.', '..', 'a.b.c', `${live[0]}.${live[0]}`), weight: 1 },
  );
}

const isoDate = fc.date({ noInvalidDate: true }).map((d) => d.toISOString());
export const sinceValue = fc.oneof(
  { arbitrary: isoDate, weight: 3 },
  {
    arbitrary: fc.constantFrom(
      '2026-03-10T12:00:00+05:30',
      '2026-03-10T12:00:00Z',
      '2026-03-10',
      '2026-13-40T99:99:99Z',
      '0000-01-01T00:00:00Z',
      '+275760-09-13T00:00:00.000Z',
      '-271821-04-20T00:00:00Z',
      '2026-03-10T12:00:00',
      '2026-03-10T12:00:00.123456789Z',
    ),
    weight: 2,
  },
);

/** A query string: the list's own parameters (well-shaped or not), unknown ones, repeats, bad escapes, long values. */
export function query(params: Record<string, fc.Arbitrary<string>>): fc.Arbitrary<string> {
  const known = Object.keys(params);
  const pair = fc.oneof(
    { arbitrary: fc.constantFrom(...known).chain((k) => params[k]!.map((v) => `${k}=${pct(wtf8(v))}`)), weight: 8 },
    { arbitrary: fc.tuple(fc.constantFrom(...known), urlText(oddString(30))).map(([k, v]) => `${k}=${v}`), weight: 3 },
    {
      arbitrary: fc
        .tuple(urlText(fc.oneof(fc.constantFrom('__proto__', 'constructor', 'limit[]', 'sandbox'), oddString(10))), urlText(oddString(10)))
        .map(([k, v]) => `${k}=${v}`),
      weight: 1,
    },
    { arbitrary: fc.constantFrom(...known, '', '=', '&', '=='), weight: 1 },
    { arbitrary: fc.constantFrom(...known).chain((k) => longUrlText.map((v) => `${k}=${v}`)), weight: 1 },
  );
  return fc.array(pair, { maxLength: 5 }).map((pairs) => (pairs.length > 0 ? `?${pairs.join('&')}` : ''));
}
