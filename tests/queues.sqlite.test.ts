import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type SqliteStore, openDatabase } from '../db/client.js';
import { createGroupCommit } from '../db/group-commit.js';
import { markQueued, onQueueMarked } from '../db/queue-wake.js';

/**
 * The wake of the durable queues after SQLite's group commit (db/group-commit.ts): a mark made in a job wakes once
 * its batch's WAL flush is done. SQLite's own machinery (a Postgres server commits each write in its own transaction:
 * queues.test.ts tests that wake on both engines).
 */

let dataDir: string;
let store: SqliteStore;

beforeEach(() => {
  dataDir = mkdtempSync(join(tmpdir(), 'mailstead-queues-'));
  store = openDatabase(dataDir);
});

afterEach(() => {
  store.close();
  rmSync(dataDir, { recursive: true, force: true });
});

describe('the wake after the group commit’s flush', () => {
  const ticks = () => new Promise((r) => setImmediate(r));

  it('wakes a mark made in a job of the group commit only once its batch is flushed, never for a job rolled back', async () => {
    const flushes: (() => void)[] = [];
    const commits = createGroupCommit(store, () => new Promise<void>((resolve) => flushes.push(resolve)));
    const heard: string[] = [];
    onQueueMarked(store.db, 'webhooks', () => heard.push('webhooks'));
    onQueueMarked(store.db, 'recipients', () => heard.push('recipients'));
    const order: string[] = [];
    const ok = commits.run((db) => markQueued(db, 'webhooks')).then(() => order.push(`resolved after ${heard.length} wake(s)`));
    const failed = commits.run((db) => {
      markQueued(db, 'recipients');
      throw new Error('refused');
    });
    await expect(failed).rejects.toThrow('refused');
    await expect.poll(() => flushes.length).toBe(1);
    for (let i = 0; i < 5; i++) await ticks();
    expect(heard).toEqual([]); // committed, not yet durable
    flushes[0]!();
    await ok;
    expect(heard).toEqual(['webhooks']);
    expect(order).toEqual(['resolved after 1 wake(s)']); // woken before the writer goes on
  });
});
