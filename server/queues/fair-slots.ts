/**
 * Connection slots shared fairly between accounts. A slot is one open (or opening) SMTP connection of one account to
 * one destination. Three bounds hold at every moment: `total` slots in all, `perAccount` for one account and
 * `perDestination` for one destination (whatever the accounts). Waiting accounts are served in turn (round-robin:
 * an account served goes to the back of the line), so an account with much queued mail, or mail to slow
 * destinations, never holds every slot while another waits. A holder may also be asked to yield (`shouldYield`)
 * between two transactions when an account holding fewer slots waits for one that its release would free.
 */

export interface SlotLimits {
  total: number;
  perAccount: number;
  /** A number, or read at each grant (the share of a destination's connections this node may open among the live nodes). */
  perDestination: number | (() => number);
}

export interface Slot {
  readonly account: string;
  readonly destination: string;
  /** Gives the slot back; the next waiter in turn gets it at once. Idempotent. */
  release(): void;
}

interface Waiter {
  account: string;
  destination: string;
  grant: (slot: Slot | null) => void;
}

export function createFairSlots(limits: SlotLimits) {
  let total = 0;
  const byAccount = new Map<string, number>();
  const byDestination = new Map<string, number>();
  /** Waiters by account, accounts in turn order (Map keeps insertion order; a served account is re-inserted last). */
  const waiting = new Map<string, Waiter[]>();

  const count = (m: Map<string, number>, k: string) => m.get(k) ?? 0;
  const bump = (m: Map<string, number>, k: string, by: number) => {
    const n = count(m, k) + by;
    if (n === 0) m.delete(k);
    else m.set(k, n);
  };

  /** Whether a slot for (account, destination) fits now, optionally as if `freed` had been released. */
  function fits(account: string, destination: string, freed?: Slot): boolean {
    const free = freed ? 1 : 0;
    const accountHeld = count(byAccount, account) - (freed && freed.account === account ? 1 : 0);
    const destinationHeld = count(byDestination, destination) - (freed && freed.destination === destination ? 1 : 0);
    const perDestination = typeof limits.perDestination === 'function' ? limits.perDestination() : limits.perDestination;
    return total - free < limits.total && accountHeld < limits.perAccount && destinationHeld < perDestination;
  }

  function take(account: string, destination: string): Slot {
    total++;
    bump(byAccount, account, 1);
    bump(byDestination, destination, 1);
    let released = false;
    return {
      account,
      destination,
      release() {
        if (released) return;
        released = true;
        total--;
        bump(byAccount, account, -1);
        bump(byDestination, destination, -1);
        dispatch();
      },
    };
  }

  /** Grants free slots to waiters, one account at a time in turn, until none fits. */
  function dispatch(): void {
    for (;;) {
      let served = false;
      for (const [account, queue] of waiting) {
        const i = queue.findIndex((w) => fits(w.account, w.destination));
        if (i < 0) continue;
        const [waiter] = queue.splice(i, 1);
        waiting.delete(account);
        if (queue.length > 0) waiting.set(account, queue);
        waiter!.grant(take(waiter!.account, waiter!.destination));
        served = true;
        break;
      }
      if (!served || total >= limits.total) return;
    }
  }

  return {
    /** A slot for `account` to `destination`, now or in turn; null when `cancelAll` ends the wait. */
    acquire(account: string, destination: string): Promise<Slot | null> {
      // Only when nobody waits may a request skip the line.
      if (waiting.size === 0 && fits(account, destination)) return Promise.resolve(take(account, destination));
      return new Promise((grant) => {
        const queue = waiting.get(account) ?? [];
        queue.push({ account, destination, grant });
        if (!waiting.has(account)) waiting.set(account, queue);
        dispatch();
      });
    },

    /**
     * True when another account that holds fewer slots than this one waits for a slot that releasing this one would
     * let it have: the holder should finish its transaction, release, and ask again (behind it).
     */
    shouldYield(slot: Slot): boolean {
      const mine = count(byAccount, slot.account);
      for (const [account, queue] of waiting) {
        if (account === slot.account || count(byAccount, account) >= mine - 1) continue;
        if (queue.some((w) => fits(w.account, w.destination, slot))) return true;
      }
      return false;
    },

    /** Ends every wait with null (shutdown). */
    cancelAll(): void {
      const all = [...waiting.values()].flat();
      waiting.clear();
      for (const w of all) w.grant(null);
    },

    /** Slots held now: in all, and by one account or destination (tests, logs). */
    held(by?: { account?: string; destination?: string }): number {
      if (by?.account !== undefined) return count(byAccount, by.account);
      if (by?.destination !== undefined) return count(byDestination, by.destination);
      return total;
    },

    /** Requests waiting for a slot. */
    waiting(): number {
      let n = 0;
      for (const q of waiting.values()) n += q.length;
      return n;
    },
  };
}

export type FairSlots = ReturnType<typeof createFairSlots>;
