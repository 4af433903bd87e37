/**
 * A background loop that runs `tick` every `intervalMs`, and at once when poked: the shape shared by the delivery
 * engine, the webhook dispatcher and the customer-database writer. A tick that returns true (it filled its batch)
 * runs again at once. A tick's error is handed to `onError`, never thrown: the loop goes on.
 */
export function createPollLoop(opts: { intervalMs: number; tick: () => Promise<boolean | undefined>; onError: (err: unknown) => void }) {
  let running = false;
  let wake: (() => void) | null = null;
  // Poked while a tick was running (its claim awaits the database): the next tick runs at once, as if it had been
  // waiting.
  let poked = false;
  let done: Promise<void> = Promise.resolve();

  async function loop(): Promise<void> {
    while (running) {
      let again = false;
      poked = false;
      try {
        again = (await opts.tick()) === true;
      } catch (err) {
        opts.onError(err);
      }
      // Stopped while the tick ran (its claim awaits the database): no wait for the interval.
      if (!running) break;
      if (again || poked) continue;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, opts.intervalMs);
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      wake = null;
    }
  }

  return {
    get running(): boolean {
      return running;
    },
    start(): void {
      if (running) return;
      running = true;
      done = loop();
    },
    /** Runs the next tick now instead of at the end of the interval. */
    poke(): void {
      poked = true;
      wake?.();
    },
    /** Stops after the tick in progress; resolves once the loop has returned. */
    async stop(): Promise<void> {
      running = false;
      wake?.();
      await done;
    },
  };
}
