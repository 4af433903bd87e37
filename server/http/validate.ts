import type { z } from 'zod';
import { ApiError } from '../errors.js';

/**
 * The path of the first `__proto__` key anywhere in parsed JSON, or null. JSON.parse makes it an ordinary own key, but
 * copying it into a new object (as validation does) sets the prototype instead: the field would vanish silently.
 */
function protoKeyPath(value: unknown, path: string[] = []): string[] | null {
  if (typeof value !== 'object' || value === null) return null;
  for (const [key, child] of Object.entries(value)) {
    if (key === '__proto__') return [...path, key];
    const found = protoKeyPath(child, [...path, key]);
    if (found) return found;
  }
  return null;
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
  const proto = protoKeyPath(value);
  if (proto) throw new ApiError('invalid_request', `${proto.join('.')}: is not an allowed field name`);
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
