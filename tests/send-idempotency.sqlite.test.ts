import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createGroupCommit } from '../db/group-commit.js';
import {
  connectSockets,
  emailRows,
  expectError,
  newSender,
  outboundMessagesOf,
  queuedRecipientsOf,
  type RawResponse,
  rawRequest,
  receipt,
  sendEmail,
} from './helpers/sending.js';
import { sqliteStoreOf, startService, type TestService } from './helpers/service.js';
import { replaceDep } from './helpers/replace-dep.js';

/**
 * The idempotency rules of send-idempotency.test.ts where SQLite's group commit decides the moment (a flush held or
 * failed under a committed send): SQLite's own machinery, so `npm test` only (tests/vitest.postgres.config.ts). The
 * race of two requests under one key on Postgres is in state-races.test.ts.
 */

let service: TestService;

beforeAll(async () => {
  service = await startService();
});
afterAll(async () => {
  await service.close();
});

const withKey = (key: string) => ({ headers: { 'Idempotency-Key': key } });

/** A WAL flush the test holds until `release()`; after that, flushes end at once. */
function heldWal() {
  const held: (() => void)[] = [];
  let holding = true;
  return {
    held,
    sync: () => (holding ? new Promise<void>((resolve) => held.push(resolve)) : Promise.resolve()),
    release(): void {
      holding = false;
      for (const flushed of held) flushed();
    },
  };
}

describe('a send committed whose flush failed', () => {
  it('answers 500 internal_error saying it may go out, logs no second row, keeps it queued, and a retry under the same key learns the answer', async () => {
    const s = await newSender(service);
    const body = receipt(s.from, ['flush-failed@example.net']);
    const real = service.deps.commits;
    // SQLite committed the batch; the disk refused the WAL's fdatasync (EIO).
    replaceDep(
      service.deps,
      'commits',
      createGroupCommit(sqliteStoreOf(service.deps), async () => {
        throw Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' });
      }),
    );
    let res: Awaited<ReturnType<typeof sendEmail>>;
    try {
      res = await sendEmail(service, s.key, body, withKey('flush-failed'));
    } finally {
      replaceDep(service.deps, 'commits', real);
    }
    // Not 502 send_failed ("nothing was sent"): the send is in the queue and will go out unless the disk lost it.
    expectError(res, 500, 'internal_error');
    expect(res.body.error.message).toMatch(/may still be sent/);
    const rows = await emailRows(service, s.account.id);
    expect(rows.map((r) => r.status)).toEqual(['sent']);
    expect((await outboundMessagesOf(service, s.account.id)).map((m) => m.id)).toEqual([rows[0]!.id]);
    // The same key, once the disk flushes again, replays the answer the send settled with.
    const retry = await sendEmail(service, s.key, body, withKey('flush-failed'));
    expect(retry.status).toBe(200);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.body).toMatchObject({ id: rows[0]!.id, sandbox: false });
    expect(await emailRows(service, s.account.id)).toHaveLength(1);
    expect(service.deps.storeHealth.faulty()).toBe(true);
  });
});

describe('in progress', () => {
  it('a replay of an answer committed but not yet on disk waits for the flush that makes it durable', async () => {
    const s = await newSender(service);
    const body = receipt(s.from, ['ann@example.net']);
    const wal = heldWal();
    const real = service.deps.commits;
    replaceDep(service.deps, 'commits', createGroupCommit(sqliteStoreOf(service.deps), wal.sync));
    try {
      const first = sendEmail(service, s.key, body, withKey('durable-replay'));
      // Committed (the answer is in the idempotency row), its flush held: not acknowledged.
      await expect.poll(() => wal.held.length).toBe(1);
      let replayed = false;
      const replay = sendEmail(service, s.key, body, withKey('durable-replay')).then((r) => {
        replayed = true;
        return r;
      });
      await new Promise((r) => setTimeout(r, 100));
      expect(replayed).toBe(false);
      wal.release();
      const [a, b] = await Promise.all([first, replay]);
      expect(a.status).toBe(200);
      expect(b.status).toBe(200);
      expect(b.headers.get('idempotent-replayed')).toBe('true');
      expect(b.body).toEqual(a.body);
    } finally {
      replaceDep(service.deps, 'commits', real);
    }
  });

  it('two identical requests at once: one 200, one 409 idempotency_in_progress, one email and one queued message', async () => {
    const s = await newSender(service);
    const body = receipt(s.from, ['ann@example.net', 'bob@example.net']);
    const opts = {
      headers: { authorization: `Bearer ${s.key}`, 'content-type': 'application/json', 'Idempotency-Key': 'concurrent-1' },
      body: JSON.stringify(body),
    };
    const sockets = await connectSockets(service, 2);
    // A flush of the WAL this test holds is under way, so the first request's commit waits for its end: that request
    // is still in progress when the second arrives, however the two are scheduled.
    const wal = heldWal();
    const real = service.deps.commits;
    replaceDep(service.deps, 'commits', createGroupCommit(sqliteStoreOf(service.deps), wal.sync));
    let answers: RawResponse[];
    try {
      void service.deps.commits.run(() => undefined);
      await expect.poll(() => wal.held.length).toBe(1);
      const pending = sockets.map((socket) => rawRequest(service, 'POST', '/emails', { ...opts, socket }));
      const early = await Promise.race(pending);
      expect(early.status).toBe(409);
      expect(early.body).toEqual({ error: { code: 'idempotency_in_progress', message: expect.any(String) } });
      wal.release();
      answers = await Promise.all(pending);
    } finally {
      replaceDep(service.deps, 'commits', real);
      for (const socket of sockets) socket.destroy();
    }
    expect(answers.map((a) => a.status).sort()).toEqual([200, 409]);
    const ok = answers.find((a) => a.status === 200)!;
    expect(ok.headers['idempotent-replayed']).toBeUndefined();
    expect(await emailRows(service, s.account.id)).toHaveLength(1);
    expect(await outboundMessagesOf(service, s.account.id)).toHaveLength(1);
    expect(await queuedRecipientsOf(service, s.account.id)).toHaveLength(2);
    const replay = await sendEmail(service, s.key, body, withKey('concurrent-1'));
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body).toEqual(ok.body);
  });
});
