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

/** Validates input with a zod schema; a failure is `422 invalid_request` naming the first failing field. */
export function parseInput<S extends z.ZodType>(schema: S, value: unknown, where = 'body'): z.output<S> {
  const proto = protoKeyPath(value);
  if (proto) throw new ApiError('invalid_request', `${proto.join('.')}: is not an allowed field name`);
  const result = schema.safeParse(value);
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
  if (path === '') throw new ApiError('invalid_request', `${where}: ${issue.code === 'invalid_type' ? 'must be a JSON object' : issue.message}`);
  throw new ApiError('invalid_request', `${path}: ${issue.message}`);
}
