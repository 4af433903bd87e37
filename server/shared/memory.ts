import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/**
 * Streaming a large message through the process (the SMTP socket, the sealed spool, the parser, the Postgres
 * protocol) copies every chunk a few times. The copies are garbage at once, but V8 collects the memory behind
 * Buffers only when its own heap asks for it, so a 25 MB message raised the resident set by twice its size before any
 * collection ran. A path that streams one payload (the DATA stream, each pass over a spool file, an attachment on its
 * way to Postgres) counts it with its own collector: once that payload passes COLLECT_EVERY_BYTES, and every as many
 * bytes after, a full collection runs (a 25 MB message then raises the peak by 6-7 MB, not 52). Small messages (nearly
 * all) never cause one: a collection pauses every session (10-50 ms on a busy machine).
 */

export const COLLECT_EVERY_BYTES = 512 * 1024;

setFlagsFromString('--expose-gc');
const collect = runInNewContext('gc') as () => void;

export function createCollector() {
  let since = 0;
  return {
    streamed(bytes: number): void {
      since += bytes;
      if (since < COLLECT_EVERY_BYTES) return;
      since = 0;
      collect();
    },
  };
}
