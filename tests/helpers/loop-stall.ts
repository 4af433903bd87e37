import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';

/**
 * How long this thread's event loop is held at a time, for the tests of work that must yield ("never holds the loop
 * past 50 ms"). A 1 ms timer notes each time it fires; a gap between two firings is time the loop could not serve.
 * On a machine shared with other processes a gap also holds time this thread sat runnable while another took the CPU,
 * which no code of ours can avoid: Linux counts it per thread (the second field of /proc/thread-self/schedstat, in
 * nanoseconds), and it is taken off the gap. What is left is the loop held by this thread's own work: JavaScript,
 * SQLite, garbage collection, a synchronous disk flush.
 */
export interface LoopStalls {
  /** The longest gap, less the time spent waiting for a CPU in it (the gap itself where Linux does not tell). */
  longestMs: number;
  /** The longest gap as the wall clock saw it. */
  longestWallMs: number;
  /** Whether the CPU wait could be read (Linux with schedstats); if not, longestMs is the wall-clock gap. */
  corrected: boolean;
  /** Gaps seen. */
  samples: number;
}

const SCHEDSTAT = '/proc/thread-self/schedstat';

/** Nanoseconds this thread has spent waiting for a CPU since it started, or null where the system does not tell. */
function runqueueWaitNs(): number | null {
  try {
    const wait = Number(readFileSync(SCHEDSTAT, 'utf8').split(' ')[1]);
    return Number.isFinite(wait) ? wait : null;
  } catch {
    return null;
  }
}

/** Starts watching; `stop()` ends it and answers what was seen since. */
export function watchLoopStalls(): { stop(): LoopStalls } {
  const corrected = runqueueWaitNs() !== null;
  let lastAt = performance.now();
  let lastWait = runqueueWaitNs() ?? 0;
  const seen: LoopStalls = { longestMs: 0, longestWallMs: 0, corrected, samples: 0 };
  const note = () => {
    const at = performance.now();
    const wait = runqueueWaitNs() ?? 0;
    const gap = at - lastAt;
    const held = gap - (wait - lastWait) / 1e6;
    seen.longestWallMs = Math.max(seen.longestWallMs, gap);
    seen.longestMs = Math.max(seen.longestMs, held);
    seen.samples += 1;
    lastAt = at;
    lastWait = wait;
  };
  const timer = setInterval(note, 1);
  return {
    stop() {
      clearInterval(timer);
      note();
      return { ...seen };
    },
  };
}
