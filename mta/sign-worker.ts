import { parentPort } from 'node:worker_threads';
import type { SigningKey } from './dkim.js';
import { buildSignedMessage } from './message.js';
import type { SignBatch, SignReply } from './signer.js';

/** The signer's thread (mta/signer.ts): builds and signs each message of a batch, answers the batch at once. */

const keys = new Map<string, SigningKey>();

parentPort!.on('message', (batch: SignBatch) => {
  for (const key of batch.keys) keys.set(key.id, key);
  const replies: SignReply[] = [];
  const moved: ArrayBuffer[] = [];
  for (const r of batch.requests) {
    try {
      const key = keys.get(r.keyId);
      if (!key) throw new Error(`domain key ${r.keyId} was never sent to the signing thread`);
      const signed = buildSignedMessage(r.message, r.to, key, new Date(r.signTime));
      // Its own ArrayBuffer, moved to the event loop's thread rather than cloned.
      const raw = signed.byteOffset === 0 && signed.byteLength === signed.buffer.byteLength ? signed : new Uint8Array(signed);
      moved.push(raw.buffer as ArrayBuffer);
      replies.push({ id: r.id, raw });
    } catch (err) {
      replies.push({ id: r.id, error: (err as Error).message });
    }
  }
  parentPort!.postMessage(replies, moved);
});
