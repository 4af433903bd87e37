import type { Clock } from '../../server/shared/clock.js';

/**
 * A clock the test moves by hand. `advance` and `set` move both readings, the wall clock and the monotonic one;
 * `stepWall` moves the wall clock alone, as NTP or an operator correcting it would.
 */
export class FakeClock implements Clock {
  private mono = 1_000_000;
  constructor(private ms = Date.parse('2026-03-10T12:00:00.000Z')) {}
  now(): number {
    return this.ms;
  }
  monotonic(): number {
    return this.mono;
  }
  /**
   * Both readings move to `iso` together: time passing when it is later, a rewind of the test's whole world when it
   * is earlier (which no real clock does; a step of the wall clock alone is `stepWall`).
   */
  set(iso: string | number): void {
    const to = typeof iso === 'number' ? iso : Date.parse(iso);
    this.mono += to - this.ms;
    this.ms = to;
  }
  advance(ms: number): void {
    if (ms < 0) throw new Error('time does not run backward: step the wall clock with stepWall');
    this.ms += ms;
    this.mono += ms;
  }
  /** The wall clock jumps by `ms` (negative: back), no time passing. */
  stepWall(ms: number): void {
    this.ms += ms;
  }
}
