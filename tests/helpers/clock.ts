import type { Clock } from '../../server/clock.js';

/** A clock the test moves by hand. */
export class FakeClock implements Clock {
  constructor(private ms = Date.parse('2026-03-10T12:00:00.000Z')) {}
  now(): number {
    return this.ms;
  }
  set(iso: string | number): void {
    this.ms = typeof iso === 'number' ? iso : Date.parse(iso);
  }
  advance(ms: number): void {
    this.ms += ms;
  }
}
