import type { SQL } from 'drizzle-orm';

/**
 * Late writes, on Postgres: a unit of a transaction that takes them (a batch of the group commit) asks for a write of a
 * row that other nodes' transactions write too (an account's counters) to be issued at the transaction's end, with
 * its COMMIT, rather than in its turn. The row is then locked only from that write to the commit, with no round trip
 * in between, instead of from the unit's reading to the commit. The units read the row unlocked and decide on what
 * they read; the late write applies what they counted as changes to the row as it stands then, under a guard that
 * their decisions still hold. A guard that fails, or a write that cannot be made late, rolls the whole transaction
 * back (LateWriteRefusedError), and the caller runs it again without late writes: its units then lock and read the
 * row in their turn, as they always did.
 */

/** How one kind of late write is issued: all of a transaction's entries under one key in one statement. */
export interface LateKind {
  /**
   * The statement writing `entries` (in the order asked) to the row `key`, which fails (an error, so the transaction is
   * rolled back) when the guard does not hold; or null when these entries cannot be written late at all.
   */
  statement(key: string, entries: readonly unknown[]): SQL | null;
}

export interface LateWrite {
  kind: LateKind;
  key: string;
  entry: unknown;
}

/** A late write refused (its guard failed, or it could not be made late): nothing of the transaction was written. */
export class LateWriteRefusedError extends Error {
  override name = 'LateWriteRefusedError';
  constructor(override readonly cause?: unknown) {
    super(`a late write was refused, the transaction rolled back${cause instanceof Error ? `: ${cause.message}` : ''}`);
  }
}

/**
 * The statements of a transaction's late writes: one a key for each kind, the keys of a kind in sorted order (two
 * transactions writing the same rows late lock them in the same order), kinds in the order first asked. Throws
 * LateWriteRefusedError when a kind cannot write its entries late.
 */
export function lateStatements(writes: readonly LateWrite[]): SQL[] {
  const byKind = new Map<LateKind, Map<string, unknown[]>>();
  for (const w of writes) {
    const keys = byKind.get(w.kind) ?? new Map<string, unknown[]>();
    byKind.set(w.kind, keys);
    const entries = keys.get(w.key) ?? [];
    keys.set(w.key, entries);
    entries.push(w.entry);
  }
  const out: SQL[] = [];
  for (const [kind, keys] of byKind) {
    for (const key of [...keys.keys()].sort()) {
      const statement = kind.statement(key, keys.get(key)!);
      if (!statement) throw new LateWriteRefusedError();
      out.push(statement);
    }
  }
  return out;
}

/** Runs `attempt` taking late writes; once more without them if one was refused. */
export async function lateOrLocked<T>(attempt: (late: boolean) => Promise<T>): Promise<T> {
  try {
    return await attempt(true);
  } catch (err) {
    if (!(err instanceof LateWriteRefusedError)) throw err;
    return attempt(false);
  }
}
