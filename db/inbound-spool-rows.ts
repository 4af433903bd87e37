import { and, asc, eq, gte, sql } from 'drizzle-orm';
import type { Db } from './client.js';
import { SPOOL_PAGE_RECORDS, createRecordSealer, sealedFromPages } from './inbound-spool.js';
import type { InboundSpool, SpoolPage, SpoolWriter } from './inbound-spool-store.js';
import { inboundSpoolRecords } from './schema/index.js';
import { execute, queryRow } from './sql.js';

/**
 * The inbound spool as rows of the Postgres state (`inbound_spool_records`): the spool file's sealed records
 * (db/inbound-spool.ts), one row each by `seq`, so the writer of any node reads what another node received and no
 * node keeps a message in DATA_DIR.
 *
 * Durable as the file is: each full record is inserted as it is sealed, in a transaction committed with
 * `synchronous_commit = off` (no WAL flush waited for, no round trip per 64 KB spent on the disk), and the last ones
 * with the end record in a transaction committed as every other (on): Postgres flushes its WAL in order, so that
 * commit is durable only once every record before it is, as the file's one fsync at the end makes it. The records are
 * written before the commit that queues their write, as the file is: the sweep removes those no write reads.
 */

export function createRowSpool(db: Db, now: () => number): InboundSpool {
  const page: SpoolPage = async (id, from) =>
    await db
      .select({ seq: inboundSpoolRecords.seq, record: inboundSpoolRecords.record })
      .from(inboundSpoolRecords)
      .where(and(eq(inboundSpoolRecords.spoolId, id), gte(inboundSpoolRecords.seq, from)))
      .orderBy(asc(inboundSpoolRecords.seq))
      .limit(SPOOL_PAGE_RECORDS);
  const remove = (id: string) => db.delete(inboundSpoolRecords).where(eq(inboundSpoolRecords.spoolId, id));

  function create(key: Buffer, id: string): SpoolWriter {
    let seq = 0;
    /** Records sealed and not yet sent. */
    let waiting: Buffer[] = [];
    /** The insert in flight, if any; its failure fails every append and the finish after it. */
    let writing: Promise<void> | null = null;
    let failure: unknown = null;
    let discarded = false;
    const insert = async (records: Buffer[], durable: boolean) => {
      const first = seq;
      seq += records.length;
      const at = now();
      const rows = records.map((record, i) => ({ spoolId: id, seq: first + i, record, createdAt: at }));
      await db.transaction(async () => {
        if (!durable) await execute(db, sql`set local synchronous_commit = off`);
        await db.insert(inboundSpoolRecords).values(rows);
      });
    };
    /** Sends what is waiting, a statement at a time, until nothing is. */
    const drain = () => {
      writing ??= (async () => {
        try {
          while (waiting.length > 0 && failure === null && !discarded) {
            const records = waiting;
            waiting = [];
            await insert(records, false);
          }
        } catch (err) {
          failure = err;
        } finally {
          writing = null;
        }
      })();
      return writing;
    };
    const sealer = createRecordSealer(key, id, (record) => waiting.push(record));
    return {
      append(chunk) {
        if (failure !== null) throw failure;
        sealer.append(chunk);
        if (waiting.length === 0) return;
        const sent = drain();
        // More than a record behind the insert in flight: the caller waits (no more of the socket is read meanwhile).
        // The wait never rejects (one left unawaited would be an unhandled rejection): a failure is thrown by the next
        // append, or by finish.
        if (waiting.length > 1) return sent;
      },
      async finish() {
        const last = sealer.end();
        while (writing) await writing;
        if (failure !== null) throw failure;
        await insert([...waiting, ...last], true);
        waiting = [];
      },
      async discard() {
        discarded = true;
        waiting = [];
        while (writing) await writing;
        // What cannot be removed now (the state unreachable) is the sweep's.
        await remove(id).catch(() => undefined);
      },
    };
  }

  return {
    kind: 'rows',
    create,
    sealed: (id) => sealedFromPages(page, id),
    page,
    async release(id) {
      await execute(
        db,
        sql`delete from inbound_spool_records where spool_id = ${id} and not exists (select 1 from customer_db_writes w where w.spool_id = ${id})`,
      );
    },
    async sweep(olderThanMs) {
      // The file sweep's rules: untouched (its newest record) for olderThanMs, and no queued write reads it.
      const gone = await queryRow<{ n: number }>(
        db,
        sql`with gone as (delete from inbound_spool_records where spool_id in (
          select r.spool_id from inbound_spool_records r group by r.spool_id having max(r.created_at) < ${now() - olderThanMs}
            and not exists (select 1 from customer_db_writes w where w.spool_id = r.spool_id)) returning spool_id)
          select count(distinct spool_id) as n from gone`,
      );
      return Number(gone?.n ?? 0);
    },
  };
}
