import fc from 'fast-check';

/**
 * JSON bodies for the API fuzz test, as trees that can hold what a plain value cannot: nesting 10,000 levels deep,
 * strings of nearly 1 MB, number literals JSON.stringify never writes (1e999, -0), own `__proto__` keys and invalid
 * UTF-8 inside a string. A tree serializes to the exact bytes sent and to a JavaScript expression that rebuilds them,
 * so a failure reports a request that can be replayed as is.
 */

export type Json =
  | { t: 'lit'; v: null | boolean | number | string }
  /** JSON text written as is: a number literal such as `1e999` or `-0`. */
  | { t: 'raw'; text: string }
  /** A string value of `unit` repeated `count` times. */
  | { t: 'huge'; unit: string; count: number }
  /** A string value holding bytes that are not UTF-8 between two ordinary parts. */
  | { t: 'bytes'; before: string; bytes: number[]; after: string }
  /** `open` `depth` times, the leaf, then `close` `depth` times. */
  | { t: 'deep'; open: string; close: string; depth: number; leaf: Json }
  | { t: 'arr'; items: Json[] }
  | { t: 'obj'; entries: [string, Json][] };

/** A piece of a body: text, a unit repeated, or raw bytes. */
export type Piece = string | { unit: string; count: number } | { bytes: number[] };

/** Under 1 MB, as docs/api/contract.md's body limit (`server/api/http/body.ts` MAX_BODY_BYTES). */
export const BODY_LIMIT = 1024 * 1024;

/** A plain JSON value as a tree. */
export function fromValue(v: unknown): Json {
  if (v === null || typeof v === 'boolean' || typeof v === 'number' || typeof v === 'string') return { t: 'lit', v };
  if (Array.isArray(v)) return { t: 'arr', items: v.map(fromValue) };
  if (typeof v === 'object')
    return {
      t: 'obj',
      entries: Object.entries(v as Record<string, unknown>)
        .filter(([, x]) => x !== undefined)
        .map(([k, x]) => [k, fromValue(x)]),
    };
  return { t: 'lit', v: null };
}

/** The text of a string inside JSON quotes (lone surrogates escaped, as JSON.stringify writes them). */
const escaped = (s: string) => JSON.stringify(s).slice(1, -1);

export function toPieces(node: Json, out: Piece[] = []): Piece[] {
  switch (node.t) {
    case 'lit':
      out.push(JSON.stringify(node.v));
      break;
    case 'raw':
      out.push(node.text);
      break;
    case 'huge':
      out.push('"', { unit: escaped(node.unit), count: node.count }, '"');
      break;
    case 'bytes':
      out.push(`"${escaped(node.before)}`, { bytes: node.bytes }, `${escaped(node.after)}"`);
      break;
    case 'deep':
      out.push({ unit: node.open, count: node.depth });
      toPieces(node.leaf, out);
      out.push({ unit: node.close, count: node.depth });
      break;
    case 'arr':
      out.push('[');
      node.items.forEach((item, i) => {
        if (i > 0) out.push(',');
        toPieces(item, out);
      });
      out.push(']');
      break;
    case 'obj':
      out.push('{');
      node.entries.forEach(([k, v], i) => {
        out.push(`${i > 0 ? ',' : ''}${JSON.stringify(k)}:`);
        toPieces(v, out);
      });
      out.push('}');
      break;
  }
  return out;
}

/** Adjacent text pieces joined, so the replay expression stays short. */
function merge(pieces: Piece[]): Piece[] {
  const out: Piece[] = [];
  for (const p of pieces) {
    const last = out[out.length - 1];
    if (typeof p === 'string' && typeof last === 'string') out[out.length - 1] = last + p;
    else out.push(p);
  }
  return out;
}

export function piecesToBuffer(pieces: Piece[]): Buffer {
  return Buffer.concat(
    pieces.map((p) => (typeof p === 'string' ? Buffer.from(p, 'utf8') : 'unit' in p ? Buffer.from(p.unit.repeat(p.count), 'utf8') : Buffer.from(p.bytes))),
  );
}

/** A JavaScript expression whose value is exactly the body's bytes. */
export function piecesToExpression(pieces: Piece[]): string {
  const merged = merge(pieces);
  if (merged.every((p) => typeof p === 'string')) return `Buffer.from(${JSON.stringify(merged.join(''))})`;
  const parts = merged.map((p) =>
    typeof p === 'string'
      ? `Buffer.from(${JSON.stringify(p)})`
      : 'unit' in p
        ? `Buffer.from(${JSON.stringify(p.unit)}.repeat(${p.count}))`
        : `Buffer.from('${Buffer.from(p.bytes).toString('hex')}', 'hex')`,
  );
  return `Buffer.concat([${parts.join(', ')}])`;
}

/** UTF-8 bytes of `s` as JSON writes it inside quotes. */
const escapedBytes = (s: string) => Buffer.byteLength(escaped(s), 'utf8');

/** Text that is hard on parsers, validators and mail headers: lone surrogates, bidi controls, NUL, combining marks, emoji. */
export const ODD_PIECES = [
  '\ud800',
  '\udfff',
  '\udc00\ud800',
  '\u202e',
  '\u200f',
  '\u2066',
  '\u0000',
  '\u0007',
  '\u0301\u0302\u0303',
  '\u{1F468}\u200d\u{1F469}\u200d\u{1F467}',
  '\u{1F600}',
  '\ufeff',
  '\ufffd',
  '\u2028',
  '\u2029',
  '\r\n',
  '\n.\n',
  '\t',
  '"',
  '\\',
  '<',
  '>',
  ',',
  ';',
  '@',
  '%',
  '=?utf-8?b?c3VwcG9ydEBwYXlwYWwuY29t?=',
  '\uff20',
  'ß',
  'İ',
  '\u0130\u0131',
  'ﷺ',
  '\u0645\u0631\u062d\u0628\u0627',
  'Bcc: x@example.org',
  '__proto__',
  'constructor',
  ' ',
] as const;

/** One unit of odd text: any code point, any printable grapheme, or one of the odd pieces. */
export const oddUnit: fc.Arbitrary<string> = fc.oneof(
  { arbitrary: fc.constantFrom(...ODD_PIECES), weight: 3 },
  { arbitrary: fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }), weight: 2 },
  { arbitrary: fc.string({ unit: 'grapheme', minLength: 1, maxLength: 1 }), weight: 2 },
  { arbitrary: fc.string({ unit: 'grapheme-ascii', minLength: 1, maxLength: 1 }), weight: 3 },
);

export const oddString = (maxLength = 40, minLength = 0): fc.Arbitrary<string> => fc.string({ unit: oddUnit, minLength, maxLength });

/** A string value whose body text is about `bytes` long (bounded below 1 MB), made of one repeated odd unit. */
export const hugeString = (maxBytes = BODY_LIMIT - 8 * 1024): fc.Arbitrary<Json> =>
  fc
    .record({
      unit: fc.oneof(oddUnit, oddString(8, 1), fc.constant('a')),
      bytes: fc.oneof(fc.integer({ min: 1_000, max: 70_000 }), fc.integer({ min: 70_000, max: maxBytes }), fc.constant(maxBytes)),
    })
    .map(({ unit, bytes }) => ({ t: 'huge' as const, unit, count: Math.max(1, Math.floor(bytes / Math.max(1, escapedBytes(unit)))) }));

/** Byte sequences that are not UTF-8: a lone continuation, an overlong NUL, a surrogate, a cut sequence, 0xFF. */
const BAD_UTF8: number[][] = [[0x80], [0xc0, 0x80], [0xed, 0xa0, 0x80], [0xe2, 0x82], [0xff], [0xfe, 0xff], [0xf4, 0x90, 0x80, 0x80], [0xc3]];

export const badUtf8 = fc.constantFrom(...BAD_UTF8);

export const invalidUtf8String: fc.Arbitrary<Json> = fc
  .record({ before: oddString(10), bytes: badUtf8, after: oddString(10) })
  .map((r) => ({ t: 'bytes' as const, ...r }));

/** Shapes of deep nesting: arrays, objects, both, and objects keyed `__proto__` (what the proto scan walks). */
const NESTINGS: [string, string][] = [
  ['[', ']'],
  ['{"a":', '}'],
  ['[{"a":', '}]'],
  ['{"__proto__":', '}'],
  ['{"template":', '}'],
];

/** Nesting up to 10,000 levels: shallow, around a depth limit of 32, and deep. */
export const deepValue = (leaf: fc.Arbitrary<Json>): fc.Arbitrary<Json> =>
  fc
    .record({
      nesting: fc.constantFrom(...NESTINGS),
      depth: fc.oneof(fc.integer({ min: 1, max: 40 }), fc.integer({ min: 40, max: 10_000 }), fc.constantFrom(3_500, 6_000, 10_000)),
      leaf,
    })
    .map(({ nesting: [open, close], depth, leaf }) => ({ t: 'deep' as const, open, close, depth, leaf }));

/** Number literals past what a JS number holds, negative zero, and ones JSON.stringify would never write. */
const rawNumber: fc.Arbitrary<Json> = fc
  .constantFrom('1e308', '-1e308', '1e309', '-1e999', '-0', '-0.0', '5e-324', '1e-400', '123456789012345678901234567890', '9007199254740993', '0.1e1', '1E+2')
  .map((text) => ({ t: 'raw' as const, text }));

/** Strings that look like numbers, booleans or nothing. */
const numberishString = fc.constantFrom('NaN', 'Infinity', '-Infinity', '-0', '1e308', '', ' ', 'true', 'null', 'undefined', '0x10', '1_000');

/** Keys a validator must not trust: prototype names, spec field names in the wrong place, odd text. */
export const hostileKey = (fields: readonly string[]): fc.Arbitrary<string> =>
  fc.oneof(
    fc.constantFrom('__proto__', 'constructor', 'prototype', 'toString', 'hasOwnProperty', 'valueOf', '__defineGetter__', ''),
    ...(fields.length > 0 ? [fc.constantFrom(...fields)] : []),
    oddString(12),
  );

const primitive: fc.Arbitrary<Json> = fc.oneof(
  fc.oneof(fc.constant(null), fc.boolean(), fc.integer(), fc.double(), numberishString, oddString(30)).map((v) => ({ t: 'lit' as const, v })),
  rawNumber,
);

/** Any JSON value a client could send in place of the right one, occasionally a deep, huge or non-UTF-8 one. */
export function hostileValue(fields: readonly string[]): fc.Arbitrary<Json> {
  const { value } = fc.letrec<{ value: Json }>((tie) => ({
    value: fc.oneof(
      { depthSize: 'small', withCrossShrink: true },
      { arbitrary: primitive, weight: 8 },
      { arbitrary: fc.array(tie('value'), { maxLength: 4 }).map((items): Json => ({ t: 'arr', items })), weight: 2 },
      { arbitrary: fc.array(fc.tuple(hostileKey(fields), tie('value')), { maxLength: 4 }).map((entries): Json => ({ t: 'obj', entries })), weight: 2 },
      { arbitrary: hugeString(), weight: 1 },
      { arbitrary: invalidUtf8String, weight: 1 },
      { arbitrary: deepValue(primitive), weight: 2 },
    ),
  }));
  return value;
}

/** One change to a well-shaped body: where (an index into its places, modulo their count) and what. */
export type Mutation =
  | { op: 'replace'; at: number; value: Json }
  | { op: 'delete'; at: number }
  | { op: 'add'; at: number; key: string; value: Json }
  | { op: 'wrap'; at: number };

export const mutation = (fields: readonly string[]): fc.Arbitrary<Mutation> =>
  fc.oneof(
    fc.record({ op: fc.constant('replace' as const), at: fc.nat(), value: hostileValue(fields) }),
    fc.record({ op: fc.constant('delete' as const), at: fc.nat() }),
    fc.record({ op: fc.constant('add' as const), at: fc.nat(), key: hostileKey(fields), value: hostileValue(fields) }),
    fc.record({ op: fc.constant('wrap' as const), at: fc.nat() }),
  );

interface Place {
  get(): Json;
  set(v: Json): void;
  remove(): void;
}

/** Every value in the tree (the root first), each with a way to change it in its parent. */
function places(root: { node: Json }): Place[] {
  const out: Place[] = [{ get: () => root.node, set: (v) => (root.node = v), remove: () => (root.node = { t: 'obj', entries: [] }) }];
  const walk = (node: Json) => {
    if (node.t === 'obj') {
      for (const entry of node.entries) {
        out.push({ get: () => entry[1], set: (v) => (entry[1] = v), remove: () => node.entries.splice(node.entries.indexOf(entry), 1) });
        walk(entry[1]);
      }
    } else if (node.t === 'arr') {
      node.items.forEach((item, i) => {
        out.push({ get: () => node.items[i]!, set: (v) => (node.items[i] = v), remove: () => node.items.splice(i, 1) });
        walk(item);
      });
    }
  };
  walk(root.node);
  return out;
}

/** Applies mutations in order to a copy of the tree (wrong types, missing and extra fields, an array for an object). */
export function mutate(node: Json, mutations: Mutation[]): Json {
  const root = { node: structuredClone(node) };
  for (const m of mutations) {
    const all = places(root);
    const place = all[m.at % all.length]!;
    if (m.op === 'replace') place.set(m.value);
    else if (m.op === 'delete') place.remove();
    else if (m.op === 'wrap') place.set({ t: 'arr', items: [place.get()] });
    else {
      const containers = all.map((p) => p.get()).filter((n): n is Extract<Json, { t: 'obj' }> => n.t === 'obj');
      const target = containers[m.at % Math.max(1, containers.length)];
      if (target) target.entries.push([m.key, m.value]);
    }
  }
  return root.node;
}
