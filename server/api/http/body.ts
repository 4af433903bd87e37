import { Readable } from 'node:stream';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import type { Context } from 'hono';
import { ApiError } from '../../shared/errors.js';
import type { AppEnv } from './env.js';
import { assertJsonTextDepth } from './validate.js';

/** Bodies of this size or more are refused (docs/api/contract.md: "Request body is 1 MB or more"). */
export const MAX_BODY_BYTES = 1024 * 1024;

/** Strict: bytes that are not UTF-8 throw rather than become U+FFFD (a leading byte order mark is dropped). */
const utf8 = new TextDecoder('utf-8', { fatal: true });

const tooLarge = () => new ApiError('body_too_large', 'The request body must be under 1 MB.');

/** After a refusal the rest of a body is read and dropped (so the connection stays usable), up to this much more. */
const DRAIN_LIMIT_BYTES = 16 * MAX_BODY_BYTES;

/**
 * The client went away before its body was complete: nobody is left to answer, so this is not an error of the
 * service (the app logs it at debug level as `http.request_aborted`).
 */
export class RequestAbortedError extends Error {
  override name = 'RequestAbortedError';
}

/**
 * Collects a node request body below MAX_BODY_BYTES. Past the limit it rejects at once and drains the rest in the
 * background, so the 413 reaches the client and the keep-alive connection carries its next request; a client that
 * keeps sending past DRAIN_LIMIT_BYTES loses the connection. A stream that closes or fails before its end (the
 * client disconnected, or the server cut a request that took too long) rejects with RequestAbortedError.
 */
function collectLimited(stream: Readable): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let refused = false;
    let ended = false;
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
      ended = true;
      stream.off('data', onData);
      if (!refused) resolve(Buffer.concat(chunks, size));
    });
    // Node fails an incomplete request with ECONNRESET ("aborted"); its close is the signal either way.
    stream.once('error', () => undefined);
    stream.once('close', () => {
      if (!ended && !refused) reject(new RequestAbortedError('The client closed the connection before the request body was complete.'));
    });
  });
}

/**
 * Reads the request body, counting the bytes that actually arrive (chunked bodies included) and refusing at
 * MAX_BODY_BYTES without buffering further; a declared Content-Length at or over the limit is refused unread. GET and
 * HEAD requests have no body. Called by `guard` once the headers have passed, so a refused request's body is never
 * read by the service (the node adaptor drains it briefly after the answer, then closes).
 */
export async function readRequestBody(c: Context<AppEnv>): Promise<Buffer> {
  if (c.req.method === 'GET' || c.req.method === 'HEAD') return Buffer.alloc(0);
  const declared = c.req.header('content-length');
  if (declared !== undefined && Number(declared) >= MAX_BODY_BYTES) throw tooLarge();
  // On the node server, read the IncomingMessage itself: a web Request and its stream cost more than the body.
  const incoming = c.env?.incoming;
  return incoming ? collectLimited(incoming) : collectLimited(Readable.fromWeb((c.req.raw.body ?? new ReadableStream()) as WebReadableStream));
}

/**
 * The body as JSON; anything that does not parse is `400 invalid_json` (bytes that are not UTF-8 too, whatever
 * charset the Content-Type names: JSON is UTF-8, RFC 8259 section 8.1, and a lenient decode would store U+FFFD in
 * place of what the client sent), and JSON nested past MAX_JSON_DEPTH is `422 invalid_request` naming the field,
 * refused before it is parsed.
 */
export function jsonBody(raw: Buffer): unknown {
  let text: string;
  try {
    text = utf8.decode(raw);
  } catch {
    throw new ApiError('invalid_json', 'The request body is not valid UTF-8; JSON must be sent as UTF-8.');
  }
  if (text.trim() === '') throw new ApiError('invalid_json', 'The request body is empty; send a JSON object.');
  assertJsonTextDepth(text);
  try {
    return JSON.parse(text);
  } catch {
    throw new ApiError('invalid_json', 'The request body is not valid JSON.');
  }
}
