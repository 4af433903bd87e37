import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/**
 * Streaming a large message through the process (the SMTP socket, the sealed spool, the parser, the Postgres
 * protocol) copies every chunk a few times. The copies are garbage at once, but V8 collects the memory behind
 * Buffers only when its own heap asks for it, so a 25 MB message could raise the resident set by several times its
 * size before any collection ran. Paths that stream big payloads call `streamed(bytes)`: after every
 * COLLECT_EVERY_BYTES a full collection runs (a few milliseconds on this process's small heap), keeping the resident
 * set near flat whatever the message size.
 */

export const COLLECT_EVERY_BYTES = 2 * 1024 * 1024;

setFlagsFromString('--expose-gc');
const collect = runInNewContext('gc') as () => void;

let since = 0;

export function streamed(bytes: number): void {
  since += bytes;
  if (since < COLLECT_EVERY_BYTES) return;
  since = 0;
  collect();
}
