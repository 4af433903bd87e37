import { pooledRandomBytes } from './random-pool.js';

let lastMs = -1;
let seq = 0;

/**
 * A UUIDv7 whose order follows creation order, even within one millisecond or if the clock steps back:
 * keyset paging over ids is then paging over creation time.
 */
export function newId(nowMs: number): string {
  let ms = Math.max(nowMs, lastMs);
  if (ms === lastMs) {
    seq += 1;
    if (seq > 0xfff) {
      ms += 1;
      seq = 0;
    }
  } else {
    seq = 0;
  }
  lastMs = ms;
  const b = pooledRandomBytes(16);
  b.writeUIntBE(ms, 0, 6);
  b[6] = 0x70 | (seq >> 8);
  b[7] = seq & 0xff;
  b[8] = 0x80 | (b[8]! & 0x3f);
  const h = b.toString('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

export function isUuid(s: string): boolean {
  return UUID_RE.test(s);
}

/**
 * Forgets the time of the last id: the next one follows the clock it is given afresh. For a process that runs
 * independent services one after another, each on a clock of its own (the test runner runs many test files in one
 * process, each with its own fake clock); a service never calls it.
 */
export function restartIdOrder(): void {
  lastMs = -1;
  seq = 0;
}
