import { Readable } from 'node:stream';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import type { MiddlewareHandler } from 'hono';
import { ApiError } from '../errors.js';
import type { AppEnv } from './env.js';

/** Bodies of this size or more are refused (api.md: "Request body is 1 MB or more"). */
export const MAX_BODY_BYTES = 1024 * 1024;

const tooLarge = () => new ApiError('body_too_large', 'The request body must be under 1 MB.');

/** After a refusal the rest of a body is read and dropped (so the connection stays usable), up to this much more. */
const DRAIN_LIMIT_BYTES = 16 * MAX_BODY_BYTES;

/**
 * Collects a node request body below MAX_BODY_BYTES. Past the limit it rejects at once and drains the rest in the
 * background, so the 413 reaches the client and the keep-alive connection carries its next request; a client that
 * keeps sending past DRAIN_LIMIT_BYTES loses the connection.
 */
function collectLimited(stream: Readable): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let refused = false;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (refused) {
        if (size > DRAIN_LIMIT_BYTES) stream.destroy();
        return;
      }
      if (size >= MAX_BODY_BYTES) {
        refused = true;
        chunks.length = 0;
        reject(tooLarge());
        return;
      }
      chunks.push(chunk);
    };
    stream.on('data', onData);
    stream.once('end', () => {
      stream.off('data', onData);
      if (!refused) resolve(Buffer.concat(chunks, size));
    });
    stream.once('error', (err) => {
      if (!refused) reject(err);
    });
  });
}

/**
 * Reads the whole body first, counting the bytes that actually arrive (chunked bodies included) and refusing at
 * MAX_BODY_BYTES without buffering further; a declared Content-Length at or over the limit is refused unread.
 */
export function readBody(): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const declared = c.req.header('content-length');
    if (declared !== undefined && Number(declared) >= MAX_BODY_BYTES) throw tooLarge();
    let body: Buffer = Buffer.alloc(0);
    if (c.req.method !== 'GET' && c.req.method !== 'HEAD') {
      // On the node server, read the IncomingMessage itself: a web Request and its stream cost more than the body.
      const incoming = c.env?.incoming;
      body = incoming ? await collectLimited(incoming) : await collectLimited(Readable.fromWeb((c.req.raw.body ?? new ReadableStream()) as WebReadableStream));
    }
    c.set('rawBody', body);
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
