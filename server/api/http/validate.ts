import type { z } from 'zod';
import { ApiError } from '../../shared/errors.js';

/**
 * How deeply a JSON body may nest: the body object is level 1. No request of the API nests past 4; the limit keeps
 * every walk over a body (ours, JSON.parse's, zod's) short and flat.
 */
export const MAX_JSON_DEPTH = 32;

const tooDeep = (path: readonly string[]) => new ApiError('invalid_request', `${path.join('.') || 'body'}: is nested more than ${MAX_JSON_DEPTH} levels deep`);

/**
 * Scans JSON text for nesting past MAX_JSON_DEPTH before it is parsed, so JSON.parse never builds a deep value (it
 * is linear, but a megabyte of `[` costs it a third of a second). One pass over the characters; the stack it keeps is
 * at most MAX_JSON_DEPTH entries, each remembering its current key (as the raw literal) or array index, so the
 * refusal names the field where the nesting went too deep. Text that is not JSON is left to JSON.parse to refuse.
 */
export function assertJsonTextDepth(text: string): void {
  const stack: { key: string | null; index: number }[] = [];
  let lastString = '';
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22 /* " */) {
      const start = i;
      for (i++; i < text.length; i++) {
        const d = text.charCodeAt(i);
        if (d === 0x5c /* \ */) i++;
        else if (d === 0x22) break;
      }
      lastString = text.slice(start, i + 1);
    } else if (c === 0x3a /* : */) {
      const top = stack[stack.length - 1];
      if (top) top.key = lastString;
    } else if (c === 0x2c /* , */) {
      const top = stack[stack.length - 1];
      if (top && top.key === null) top.index++;
    } else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      if (stack.length === MAX_JSON_DEPTH) throw tooDeep(stack.map(segment));
      stack.push({ key: c === 0x7b ? '' : null, index: 0 });
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      stack.pop();
    }
  }
}

/** A path segment of the text scan: an object's key decoded from its literal, or an array's index. */
function segment(level: { key: string | null; index: number }): string {
  if (level.key === null) return String(level.index);
  try {
    const key: unknown = JSON.parse(level.key);
    return typeof key === 'string' ? key : '?';
  } catch {
    return '?';
  }
}

/**
 * One iterative pass over a parsed value: a string holding a NUL or an unpaired surrogate is refused (isText), a
 * `__proto__` key anywhere is refused (JSON.parse makes it an ordinary own
 * key, but copying it into a new object, as validation does, sets the prototype instead: the field would vanish
 * silently), and so is nesting past MAX_JSON_DEPTH. An explicit stack, so no input can overflow the call stack; each
 * entry points at its parent, so a path is only built for the refusal and the pass stays linear in the value's size.
 */
function assertPlainValue(value: unknown): void {
  interface Entry {
    value: unknown;
    depth: number;
    key: string;
    parent: Entry | null;
  }
  const pathOf = (entry: Entry | null, last?: string): string[] => {
    const path: string[] = last === undefined ? [] : [last];
    for (let e = entry; e?.parent; e = e.parent) path.push(e.key);
    return path.reverse();
  };
  const badText = (entry: Entry | null, last?: string) =>
    new ApiError('invalid_request', `${pathOf(entry, last).join('.') || 'body'}: must not contain a NUL character or an unpaired UTF-16 surrogate`);
  if (typeof value === 'string' && !isText(value)) throw badText(null);
  const stack: Entry[] = [{ value, depth: 1, key: '', parent: null }];
  while (stack.length > 0) {
    const entry = stack.pop()!;
    if (typeof entry.value !== 'object' || entry.value === null) continue;
    if (entry.depth > MAX_JSON_DEPTH) throw tooDeep(pathOf(entry));
    const children = entry.value as Record<string, unknown>;
    const keys = Object.keys(children);
    for (let i = keys.length - 1; i >= 0; i--) {
      const key = keys[i]!;
      if (key === '__proto__') throw new ApiError('invalid_request', `${pathOf(entry, key).join('.')}: is not an allowed field name`);
      if (!isText(key)) throw badText(entry, '?');
      const child = children[key];
      if (typeof child === 'object' && child !== null) stack.push({ value: child, depth: entry.depth + 1, key, parent: entry });
      else if (typeof child === 'string' && !isText(child)) throw badText(entry, key);
    }
  }
}

/**
 * Text a field may hold: no NUL (no mail header or body may carry one, and Postgres text cannot) and no unpaired
 * UTF-16 surrogate (a JSON `\ud800` escape: no UTF-8 can encode it, so it could only be changed, silently).
 */
function isText(s: string): boolean {
  return !s.includes('\0') && (s as string & { isWellFormed(): boolean }).isWellFormed();
}

/** How a wrong-type field is described: by the type it must have, never by the value it was given. */
const EXPECTED: Record<string, string> = {
  string: 'a string',
  number: 'a number',
  int: 'an integer',
  bigint: 'an integer',
  boolean: 'a boolean',
  array: 'an array',
  object: 'an object',
  date: 'a date',
  null: 'null',
};

/**
 * The per-parse error map: a wrong type reads "must be a string". A schema's own message still wins; anything else
 * keeps zod's wording. Input values are never put into a message.
 */
const errorMap: z.core.$ZodErrorMap = (issue) =>
  issue.code === 'invalid_type' && issue.input !== undefined ? `must be ${EXPECTED[issue.expected] ?? issue.expected}` : undefined;

/**
 * Validates input with a zod schema; a failure is `422 invalid_request` naming the first failing field: "is required"
 * when it is missing, the schema's message (such as "must be a string") when it is there but wrong.
 */
export function parseInput<S extends z.ZodType>(schema: S, value: unknown, where = 'body'): z.output<S> {
  assertPlainValue(value);
  // reportInput keeps `input` on the issue, which tells a missing field from a wrong one; it is read, never echoed.
  const result = schema.safeParse(value, { reportInput: true, error: errorMap });
  if (result.success) return result.data;
  const issue = result.error.issues[0];
  if (!issue) throw new ApiError('invalid_request', `Invalid ${where}.`);
  const path = issue.path.map(String).join('.');
  if (issue.code === 'unrecognized_keys') {
    const field = [path, issue.keys[0]].filter(Boolean).join('.');
    throw new ApiError('invalid_request', `${field}: is not a known field`);
  }
  if (issue.code === 'invalid_type' && issue.input === undefined) {
    throw new ApiError('invalid_request', `${path || where}: is required`);
  }
  if (path === '' && issue.code === 'invalid_type' && issue.expected === 'object') {
    throw new ApiError('invalid_request', `${where}: must be a JSON object`);
  }
  throw new ApiError('invalid_request', `${path || where}: ${issue.message}`);
}
