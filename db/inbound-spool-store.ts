import type { Readable } from 'node:stream';
import { rmSync } from 'node:fs';
import { eq } from 'drizzle-orm';
import type { Db } from './client.js';
import { createSpoolWriter, sealedFile, spoolPath, sweepSpool } from './inbound-spool.js';
import { customerDbWrites } from './schema/index.js';
import { one } from './sql.js';

/** A spooled message being written: what receive.ts holds from the moment it passes the inline size. */
export interface SpoolWriter {
  /** Seals `chunk` in; a promise when the store is behind (the caller waits for it before reading more). */
  append(chunk: Buffer): void | Promise<void>;
  /** Seals the rest and the end record: once it resolves, the message is durable. */
  finish(): Promise<void>;
  /** Removes what was written (a refused or interrupted message). */
  discard(): void | Promise<void>;
}

/**
 * Where a node keeps its spooled messages, chosen once with the store (server/app/deps.ts): files in DATA_DIR beside
 * SQLite (this file), rows of `inbound_spool_records` beside Postgres (db/inbound-spool-rows.ts), so that any node's
 * writer can read what another node received. Both hold the same sealed records.
 */
export type InboundSpool = SpoolOps & ({ readonly kind: 'files'; readonly dataDir: string } | { readonly kind: 'rows'; readonly page: SpoolPage });

/** A page of a spooled message's sealed records from `from` on, in order (empty past its last). */
export type SpoolPage = (id: string, from: number) => Promise<{ seq: number; record: Buffer }[]>;

interface SpoolOps {
  /** A writer sealing a new message under `id`. */
  create(key: Buffer, id: string): SpoolWriter;
  /** The sealed records of `id` in order, as one byte stream (what openSpool opens); it errors if there is none. */
  sealed(id: string): Readable;
  /** Removes the message `id` unless a queued write still reads it (its write landed or was dropped). */
  release(id: string): Promise<void>;
  /**
   * Removes messages untouched for `olderThanMs` that no queued write reads (a crash between the spool and its
   * commit, writes dropped): the spool is written before the commit that names it. Returns how many.
   */
  sweep(olderThanMs: number): Promise<number>;
}

/** Whether a queued customer-database write still reads the spooled message `id`. */
export async function spoolReferenced(db: Db, id: string): Promise<boolean> {
  return (await one(db.select({ id: customerDbWrites.id }).from(customerDbWrites).where(eq(customerDbWrites.spoolId, id)).limit(1))) !== undefined;
}

/** The spool as files in DATA_DIR/spool/inbound (the SQLite store's). */
export function createFileSpool(dataDir: string, db: Db): InboundSpool {
  return {
    kind: 'files',
    dataDir,
    create: (key, id) => createSpoolWriter(dataDir, key, id),
    sealed: (id) => sealedFile(spoolPath(dataDir, id)),
    async release(id) {
      if (!(await spoolReferenced(db, id))) rmSync(spoolPath(dataDir, id), { force: true });
    },
    sweep: (olderThanMs) => sweepSpool(dataDir, Date.now(), olderThanMs, (id) => spoolReferenced(db, id)),
  };
}
