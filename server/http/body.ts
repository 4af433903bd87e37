import type { MiddlewareHandler } from 'hono';
import { ApiError } from '../errors.js';
import type { AppEnv } from './env.js';

/** Bodies of this size or more are refused (api.md: "Request body is 1 MB or more"). */
export const MAX_BODY_BYTES = 1024 * 1024;

const tooLarge = () => new ApiError('body_too_large', 'The request body must be under 1 MB.');

/**
 * Reads the whole body first, counting the bytes that actually arrive (chunked bodies included) and refusing at
 * MAX_BODY_BYTES without buffering further; a declared Content-Length at or over the limit is refused unread.
 */
export function readBody(): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const declared = c.req.header('content-length');
    if (declared !== undefined && Number(declared) >= MAX_BODY_BYTES) throw tooLarge();
    const chunks: Buffer[] = [];
    let size = 0;
    // On the node server, read the IncomingMessage itself: a web Request and its stream cost more than the body.
    const source: AsyncIterable<Uint8Array> | null = c.env?.incoming ?? c.req.raw.body;
    if (source && c.req.method !== 'GET' && c.req.method !== 'HEAD') {
      for await (const chunk of source) {
        size += chunk.byteLength;
        if (size >= MAX_BODY_BYTES) throw tooLarge();
        chunks.push(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength));
      }
    }
    c.set('rawBody', Buffer.concat(chunks, size));
    await next();
  };
}

/** The body as JSON; anything that does not parse is `400 invalid_json`. */
export function jsonBody(raw: Buffer): unknown {
  const text = raw.toString('utf8');
  if (text.trim() === '') throw new ApiError('invalid_json', 'The request body is empty; send a JSON object.');
  try {
    return JSON.parse(text);
  } catch {
    throw new ApiError('invalid_json', 'The request body is not valid JSON.');
  }
}
