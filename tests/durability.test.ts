import fs, { mkdtempSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import fsp from 'node:fs/promises';
import { syncBuiltinESMExports } from 'node:module';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { sql } from 'drizzle-orm';
import nodemailer from 'nodemailer';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { openDatabase } from '../db/client.js';
import { lockDataDir } from '../db/data-dir.js';
import { FlushFailedError, createGroupCommit, walSyncOf } from '../db/group-commit.js';
import { inboundServerFor } from './helpers/inbound-server.js';
import { createSpoolWriter, spoolDir } from '../db/inbound-spool.js';
import { loadOrCreateSmtpTls } from '../mta/inbound/tls.js';
import { loadConfig } from '../server/shared/config.js';
import { resolveSecretKey } from '../server/app/deps.js';
import { processEnv, runningProcesses, startServiceProcess } from './helpers/service-process.js';
import { startService } from './helpers/service.js';
import { newSender, receipt, sendEmail } from './helpers/sending.js';
import { freePort } from '../scripts/lib/free-port.js';
import { execute } from '../db/sql.js';

/**
 * Crash safety and full disks at the edges: the first start (server.lock, secret.key, the admin token), the fsyncs
 * of files and of the directories naming them, ENOSPC, and the WAL's flush (a descriptor that could not be opened is
 * opened again; after a failed fdatasync no later write is acknowledged). Crashes are real (SIGKILL of
 * `node dist/server/app/main.js` at a chosen point, through a preload that watches one fs call or one stdout write),
 * crafted (the on-disk state such a crash leaves), or failures injected into the fs calls of the code under test.
 */

const dirs: string[] = [];
const newDir = (prefix: string) => {
  const d = mkdtempSync(join(tmpdir(), `mailstead-durability-${prefix}-`));
  dirs.push(d);
  return d;
};

afterAll(() => {
  for (const child of runningProcesses) child.kill('SIGKILL');
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** Undo of every fs patch a test made. */
const restores: (() => void)[] = [];
afterEach(() => {
  for (const r of restores.splice(0).reverse()) r();
  syncBuiltinESMExports();
});

/** Replaces `obj[name]` (an fs function) for this test; ESM named imports follow through syncBuiltinESMExports. */
function patch<T extends object, K extends keyof T>(obj: T, name: K, make: (original: T[K]) => T[K]): void {
  const original = obj[name];
  obj[name] = make(original);
  restores.push(() => {
    obj[name] = original;
  });
  syncBuiltinESMExports();
}

/**
 * Records which paths were opened and which of them were fsynced, by fsyncSync and fdatasyncSync (`onLoop`: the
 * event loop waits for the disk) or by the callback API on libuv's thread pool (`offLoop`); `synced` is both.
 */
function recordFsyncs() {
  const fdPath = new Map<number, string>();
  const synced: string[] = [];
  const onLoop: string[] = [];
  const offLoop: string[] = [];
  patch(
    fs,
    'openSync',
    (orig) =>
      ((path: fs.PathLike, ...rest: unknown[]) => {
        const fd = (orig as (...a: unknown[]) => number)(path, ...rest);
        fdPath.set(fd, resolve(String(path)));
        return fd;
      }) as typeof fs.openSync,
  );
  patch(
    fs,
    'open',
    (orig) =>
      ((path: fs.PathLike, ...rest: unknown[]) => {
        const callback = rest.pop() as (err: Error | null, fd: number) => void;
        return (orig as (...a: unknown[]) => void)(path, ...rest, (err: Error | null, fd: number) => {
          if (!err) fdPath.set(fd, resolve(String(path)));
          callback(err, fd);
        });
      }) as typeof fs.open,
  );
  for (const name of ['fsyncSync', 'fdatasyncSync'] as const) {
    patch(
      fs,
      name,
      (orig) =>
        ((fd: number) => {
          synced.push(fdPath.get(fd) ?? `fd:${fd}`);
          onLoop.push(fdPath.get(fd) ?? `fd:${fd}`);
          return (orig as (fd: number) => void)(fd);
        }) as typeof fs.fsyncSync,
    );
  }
  for (const name of ['fsync', 'fdatasync'] as const) {
    patch(
      fs,
      name,
      (orig) =>
        ((fd: number, callback: (err: Error | null) => void) => {
          synced.push(fdPath.get(fd) ?? `fd:${fd}`);
          offLoop.push(fdPath.get(fd) ?? `fd:${fd}`);
          return (orig as (fd: number, cb: (err: Error | null) => void) => void)(fd, callback);
        }) as typeof fs.fsync,
    );
  }
  return { synced, onLoop, offLoop };
}

/** A preload for the real process: `body` runs before main, with `fs` and `syncBuiltinESMExports` in scope. */
function preload(body: string): string {
  const dir = newDir('preload');
  const file = join(dir, 'preload.mjs');
  writeFileSync(file, `import fs from 'node:fs';\nimport { syncBuiltinESMExports } from 'node:module';\n${body}\n`);
  return file;
}

describe('crash during the first start', () => {
  it('a server.lock torn by a kill during its first commit (page 1 written, page 2 not) does not stop every later start', { timeout: 60_000 }, async () => {
    const dataDir = newDir('lock');
    // The lock's first commit (journal_mode=MEMORY: no journal) writes page 1, then page 2 (the holder table), each with
    // its own pwrite. A SIGKILL between the two leaves this file: the schema names a table whose page never arrived.
    lockDataDir(dataDir).release();
    truncateSync(join(dataDir, 'server.lock'), 4096);
    // The lock's content is only informative (db/data-dir.ts): the start must not depend on it.
    const proc = await startServiceProcess(processEnv(dataDir));
    proc.child.kill('SIGTERM');
    await proc.exited;
  });

  it('a start killed right after it created DATA_DIR/secret.key starts again', { timeout: 60_000 }, async () => {
    const dataDir = newDir('secret-key');
    // SIGKILL the moment a file named secret.key* is created under DATA_DIR, before a byte of it is written.
    const hook = preload(`
const dataDir = ${JSON.stringify(resolve(dataDir))};
const open = fs.openSync;
fs.openSync = (path, flags, ...rest) => {
  const fd = open(path, flags, ...rest);
  const p = String(path);
  if (p.startsWith(dataDir) && /^secret\\.key/.test(p.slice(dataDir.length + 1)) && /[wa]/.test(String(flags))) process.kill(process.pid, 'SIGKILL');
  return fd;
};
syncBuiltinESMExports();`);
    const killed = await startServiceProcess(processEnv(dataDir, { NODE_OPTIONS: `--import ${hook}` })).catch((err: unknown) => err);
    expect(String(killed)).toMatch(/signal SIGKILL/);
    // Current code: secret.key exists, empty; every start now ends with "does not hold 32 bytes of hex".
    const proc = await startServiceProcess(processEnv(dataDir));
    proc.child.kill('SIGTERM');
    await proc.exited;
  });

  it('a first start killed after the admin token is stored, before its line is printed, still gives the operator a token', { timeout: 60_000 }, async () => {
    const dataDir = newDir('admin-token');
    // SIGKILL just before the line holding the generated token reaches stdout, however it is written.
    const hook = preload(`
const write = process.stdout.write.bind(process.stdout);
process.stdout.write = (chunk, ...rest) => {
  if (String(chunk).includes('admin_token.generated')) process.kill(process.pid, 'SIGKILL');
  return write(chunk, ...rest);
};
const writeSync = fs.writeSync;
fs.writeSync = (fd, chunk, ...rest) => {
  if (fd === 1 && String(chunk).includes('admin_token.generated')) process.kill(process.pid, 'SIGKILL');
  return writeSync(fd, chunk, ...rest);
};
syncBuiltinESMExports();`);
    const first = await startServiceProcess(processEnv(dataDir, { NODE_OPTIONS: `--import ${hook}` })).catch((err: unknown) => err);
    expect(String(first)).toMatch(/signal SIGKILL/);
    const proc = await startServiceProcess(processEnv(dataDir));
    try {
      await new Promise((r) => setTimeout(r, 200));
      // Nobody ever saw the stored token; the restart prints none either: nobody can sign in to the dashboard.
      expect(proc.logs.some((l) => l.includes('"admin_token.generated"'))).toBe(true);
    } finally {
      proc.child.kill('SIGTERM');
      await proc.exited;
    }
  });
});

describe('fsync of files and their directories', () => {
  it('a spool file is durable in its directory (the directory fsynced) once finish() resolves, before the 250', async () => {
    const dataDir = newDir('spool-dir');
    const { synced } = recordFsyncs();
    const writer = createSpoolWriter(dataDir, Buffer.alloc(32, 7), 'msg-1');
    writer.append(Buffer.from('Subject: x\r\n\r\nbody\r\n'));
    await writer.finish();
    // The file itself is fsynced...
    expect(synced).toContain(resolve(writer.path));
    // ...but its new directory entry is not: a power loss after the 250 can lose the file its outbox row names.
    expect(synced).toContain(resolve(spoolDir(dataDir)));
  });

  it("a spool file's fsyncs run off the event loop: a large message's flush never stalls the other sessions", async () => {
    const dataDir = newDir('spool-off-loop');
    createSpoolWriter(dataDir, Buffer.alloc(32, 7), 'msg-0').discard(); // the directories made, once
    const { onLoop, offLoop } = recordFsyncs();
    const writer = createSpoolWriter(dataDir, Buffer.alloc(32, 7), 'msg-1');
    writer.append(Buffer.alloc(1024 * 1024, 'x'));
    await writer.finish();
    expect(offLoop).toEqual([resolve(writer.path), resolve(spoolDir(dataDir))]);
    expect(onLoop).toEqual([]);
  });

  it('the generated secret key is fsynced, with DATA_DIR, before anything is sealed with it', () => {
    const dataDir = newDir('secret-fsync');
    const config = loadConfig({ DATA_DIR: dataDir, HTTP_PORT: '0', SMTP_PORT: '0', MAIL_HOSTNAME: 'mx.mailstead.test' });
    const { synced } = recordFsyncs();
    const key = resolveSecretKey(config);
    expect(key).not.toBeNull();
    expect(readFileSync(join(dataDir, 'secret.key'), 'utf8').trim()).toBe(key!.toString('hex'));
    // Neither the key's content nor its directory entry is flushed: after a power loss the DKIM keys, webhook secrets
    // and database URLs already sealed (and acknowledged) with it can be left with an empty or missing secret.key.
    expect(synced.some((p) => dirname(p) === resolve(dataDir) && basename(p).startsWith('secret.key'))).toBe(true);
    expect(synced).toContain(resolve(dataDir));
  });
});

describe('the generated secret key, elsewhere', () => {
  const configOf = (dataDir: string) => loadConfig({ DATA_DIR: dataDir, HTTP_PORT: '0', SMTP_PORT: '0', MAIL_HOSTNAME: 'mx.mailstead.test' });

  it('on a file system without hard links (link fails EPERM) it is still created, whole', () => {
    const dataDir = newDir('no-links');
    patch(
      fs,
      'linkSync',
      () =>
        (() => {
          throw Object.assign(new Error('EPERM: operation not permitted, link'), { code: 'EPERM' });
        }) as typeof fs.linkSync,
    );
    const key = resolveSecretKey(configOf(dataDir));
    expect(readFileSync(join(dataDir, 'secret.key'), 'utf8').trim()).toBe(key!.toString('hex'));
    expect(fs.readdirSync(dataDir).filter((n) => n.endsWith('.tmp'))).toEqual([]);
  });

  it('a temporary copy left by a process that died is removed; one of a live process is left alone', () => {
    const dataDir = newDir('leftover');
    const dead = join(dataDir, 'secret.key.999999999.abcdef012345.tmp');
    const live = join(dataDir, `secret.key.${process.pid}.0123456789ab.tmp`);
    writeFileSync(dead, 'a copy of an old key');
    writeFileSync(live, 'being written now');
    resolveSecretKey(configOf(dataDir));
    expect(fs.existsSync(dead)).toBe(false);
    expect(fs.existsSync(live)).toBe(true);
  });
});

describe('full disk', () => {
  it('ENOSPC while writing secret.key on the first start leaves no file that stops every later start', () => {
    const dataDir = newDir('secret-enospc');
    const config = loadConfig({ DATA_DIR: dataDir, HTTP_PORT: '0', SMTP_PORT: '0', MAIL_HOSTNAME: 'mx.mailstead.test' });
    let full = true;
    patch(
      fs,
      'writeSync',
      (orig) =>
        ((fd: number, ...rest: unknown[]) => {
          if (full) throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC', errno: -28, syscall: 'write' });
          return (orig as (...a: unknown[]) => number)(fd, ...rest);
        }) as typeof fs.writeSync,
    );
    expect(() => resolveSecretKey(config)).toThrow(/ENOSPC/);
    full = false;
    // Space freed: the next start should generate the key. Current code: the empty file created before the failed
    // write stays, and every start fails with "does not hold 32 bytes of hex" until an operator deletes it.
    const key = resolveSecretKey(config);
    expect(key?.length).toBe(32);
  });

  it('ENOSPC while spooling a large inbound message answers 451 and marks the store unhealthy (/healthz 503)', { timeout: 30_000 }, async () => {
    const service = await startService();
    const smtpPort = await freePort();
    const inbound = inboundServerFor(service.deps, loadOrCreateSmtpTls(service.deps.config));
    try {
      await inbound.listen('127.0.0.1', smtpPort);
      const { account } = await service.newAccount();
      const receiving = JSON.stringify({ ownership: 'published', signing: 'published', spf: 'published', receiving: 'published' });
      await execute(
        service.deps.db,
        sql`insert into domain_keys (id, account_id, name, token, selector, dkim_public_key, dkim_private_key_sealed, created_at) values ('key-in', ${account.id}, 'in.example.com', 't', 's', 'p', 'k', 0)`,
      );
      await execute(
        service.deps.db,
        sql`insert into domains (id, account_id, name, key_id, record_status, created_at, last_checked_at) values ('dom-in', ${account.id}, 'in.example.com', 'key-in', ${receiving}, 0, 0)`,
      );
      await execute(
        service.deps.db,
        sql`insert into customer_databases (account_id, connection_id, url_sealed, host, port, database, "user", ssl_mode, state, schema_version, failures, next_attempt_at, updated_at, created_at)
           values (${account.id}, 'conn-in', 'x', 'h', 5432, 'd', 'u', 'require', 'connected', 1, 0, 0, 0, 0)`,
      );
      // DATA_DIR is full: every write to a spool file fails.
      const spool = resolve(spoolDir(service.dataDir));
      const fdPath = new Map<number, string>();
      patch(
        fs,
        'openSync',
        (orig) =>
          ((path: fs.PathLike, ...rest: unknown[]) => {
            const fd = (orig as (...a: unknown[]) => number)(path, ...rest);
            fdPath.set(fd, resolve(String(path)));
            return fd;
          }) as typeof fs.openSync,
      );
      for (const name of ['writeSync', 'writevSync'] as const)
        patch(
          fs,
          name,
          (orig) =>
            ((fd: number, ...rest: unknown[]) => {
              if (fdPath.get(fd)?.startsWith(spool))
                throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC', errno: -28, syscall: 'write' });
              return (orig as (...a: unknown[]) => number)(fd, ...rest);
            }) as (typeof fs)[typeof name],
        );
      const transport = nodemailer.createTransport({ host: '127.0.0.1', port: smtpPort, secure: false, ignoreTLS: true });
      const body = `${'0123456789abcdef'.repeat(4).concat('\r\n').repeat(6000)}`;
      const err = await transport
        .sendMail({
          envelope: { from: 'sender@example.org', to: ['box@in.example.com'] },
          raw: `From: sender@example.org\r\nTo: box@in.example.com\r\nSubject: big\r\n\r\n${body}`,
        })
        .then(
          () => null,
          (e: { responseCode?: number }) => e,
        );
      expect(err?.responseCode).toBe(451);
      // docs/operating/logs-and-metrics.md: /healthz answers 503 for a minute after inbound SMTP failed on its store, full disk
      // (ENOSPC) of DATA_DIR included. Current code: logged at info as `inbound.aborted`, the store never noted.
      expect(service.deps.storeHealth.faulty()).toBe(true);
      const health = await fetch(`${service.url}/healthz`);
      expect(health.status).toBe(503);
    } finally {
      await inbound.close();
      await service.close();
    }
  });
});

describe('the WAL flush', () => {
  it('a transient failure to open the -wal file (EMFILE) does not fail every later flush until a restart', async () => {
    const dataDir = newDir('walsync');
    const store = openDatabase(dataDir);
    let fail = true;
    patch(
      fsp,
      'open',
      (orig) =>
        (async (path: fs.PathLike, ...rest: unknown[]) => {
          if (fail && String(path).endsWith('-wal')) throw Object.assign(new Error('EMFILE: too many open files, open'), { code: 'EMFILE' });
          return (orig as (...a: unknown[]) => Promise<unknown>)(path, ...rest);
        }) as typeof fsp.open,
    );
    const sync = walSyncOf(store.sqlite.name);
    try {
      await expect(sync()).rejects.toMatchObject({ code: 'EMFILE' });
      fail = false;
      // The descriptors are back; current code kept the rejected open and fails this flush (and every one after it).
      await expect(sync()).resolves.toBeUndefined();
    } finally {
      await sync.close();
      store.close();
    }
  });

  it('after a flush failed (EIO), later writes are not acknowledged as durable (fsyncgate: the lost frames break the WAL before them)', async () => {
    const dataDir = newDir('fsyncgate');
    const store = openDatabase(dataDir);
    store.sqlite.exec('create table probe (n integer)');
    let calls = 0;
    // The kernel reports a writeback error once, then clears it: the next fdatasync succeeds although the earlier
    // pages never reached the disk.
    const sync = async () => {
      calls++;
      if (calls === 1) throw Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' });
    };
    const commits = createGroupCommit(store, sync);
    try {
      const first = await commits.run(async (db) => await execute(db, sql`insert into probe (n) values (1)`)).catch((e: unknown) => e);
      expect(first).toBeInstanceOf(FlushFailedError);
      // Its frames precede the next batch's in the WAL; a hole there ends recovery at the hole, taking every later
      // frame with it. Current code acknowledges the next write as durable.
      const second = await commits
        .run(async (db) => await execute(db, sql`insert into probe (n) values (2)`))
        .then(
          () => 'acknowledged',
          () => 'refused',
        );
      expect(second).toBe('refused');
    } finally {
      store.close();
    }
  });
});

describe('the service after a failed flush of its WAL', () => {
  it('refuses every later write, wherever it comes from, keeps serving reads, and /healthz stays 503 until a restart', { timeout: 30_000 }, async () => {
    const service = await startService();
    const s = await newSender(service);
    expect((await sendEmail(service, s.key, receipt(s.from, 'before@example.net'))).status).toBe(200);
    // The disk fails the next fdatasync of the WAL (EIO), once.
    const handle = await fsp.open(join(service.dataDir, 'probe'), 'w');
    const FileHandle = Object.getPrototypeOf(handle) as { datasync: () => Promise<void> };
    await handle.close();
    let failures = 1;
    patch(
      FileHandle,
      'datasync',
      (orig) =>
        async function (this: unknown) {
          if (failures-- > 0) throw Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' });
          return orig.call(this);
        },
    );
    try {
      // Committed, not known to be on disk: said so (docs/api/behaviour.md, Sending: Durability), with or without a key.
      const during = await sendEmail(service, s.key, receipt(s.from, 'during@example.net'), { headers: { 'Idempotency-Key': 'during' } });
      expect(during).toMatchObject({ status: 500, body: { error: { code: 'internal_error', message: expect.stringMatching(/may still be sent/) } } });
      // Nothing after it is taken: not through the group commit (a send, with a key or without), not elsewhere on the
      // connection (a key). Each is 503 unavailable naming the cause (docs/api/decisions.md section 13), not 502 send_failed.
      const closed = {
        status: 503,
        body: { error: { code: 'unavailable', message: expect.stringMatching(/stopped taking writes after a write to disk failed/) } },
      };
      expect(await sendEmail(service, s.key, receipt(s.from, 'after@example.net'))).toMatchObject(closed);
      expect(await sendEmail(service, s.key, receipt(s.from, 'after@example.net'), { headers: { 'Idempotency-Key': 'after' } })).toMatchObject(closed);
      expect(await sendEmail(service, s.key, receipt(s.from, 'during@example.net'), { headers: { 'Idempotency-Key': 'during' } })).toMatchObject(closed);
      expect(await service.api('POST', '/keys', { key: s.key, body: { name: 'later' } })).toMatchObject(closed);
      // Reads go on.
      expect((await service.api('GET', '/emails', { key: s.key })).status).toBe(200);
      service.clock.advance(10 * 60_000);
      expect((await fetch(`${service.url}/healthz`)).status).toBe(503);
      expect(service.logger.entries.some((e) => e.event === 'store.unsafe')).toBe(true);
    } finally {
      await service.close();
    }
  });
});

describe("SQLite's own fsync failing in a commit outside the group commit", () => {
  it('closes the store to writes as a failed flush of the group commit does', { timeout: 30_000 }, async () => {
    const service = await startService();
    try {
      const s = await newSender(service);
      // What the API's error handler hands on when a write of its own (a key, a domain: synchronous=FULL) fails there.
      service.deps.storeHealth.note(Object.assign(new Error('disk I/O error'), { code: 'SQLITE_IOERR_FSYNC' }));
      expect(service.deps.storeHealth.unsafe()).toBe(true);
      const closed = { status: 503, body: { error: { code: 'unavailable', message: expect.stringMatching(/stopped taking writes/) } } };
      expect(await sendEmail(service, s.key, receipt(s.from, 'after@example.net'))).toMatchObject(closed);
      expect(await service.api('POST', '/keys', { key: s.key, body: { name: 'later' } })).toMatchObject(closed);
      expect((await fetch(`${service.url}/healthz`)).status).toBe(503);
      // Any other failure on the store only opens the fault window.
      const other = await startService();
      try {
        other.deps.storeHealth.note(Object.assign(new Error('disk I/O error'), { code: 'SQLITE_IOERR_WRITE' }));
        expect(other.deps.storeHealth.unsafe()).toBe(false);
      } finally {
        await other.close();
      }
    } finally {
      await service.close();
    }
  });
});
