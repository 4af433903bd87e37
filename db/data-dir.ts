import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  close,
  closeSync,
  fsync,
  fsyncSync,
  linkSync,
  lstatSync,
  mkdirSync,
  open,
  openSync,
  readdirSync,
  rmSync,
  truncateSync,
  writeSync,
} from 'node:fs';
import { basename, dirname, join } from 'node:path';
import Database from 'better-sqlite3';

/**
 * DATA_DIR holds queued message content (sign-in links), the cursor signing key and the secret key: the directory
 * is the owner's only (0700) and so is every file in it (0600). SQLite creates `-wal`, `-shm` and journals with the
 * mode of their database file, so a database file created 0600 keeps its companions 0600 too.
 */
export const PRIVATE_DIR_MODE = 0o700;
export const PRIVATE_FILE_MODE = 0o600;

/** A permission tightened at start: the path and its modes before and after, as octal text. */
export interface PermissionChange {
  path: string;
  from: string;
  to: string;
}

const octal = (mode: number) => `0${(mode & 0o777).toString(8).padStart(3, '0')}`;

/** Creates `dir` (its parents as usual, itself 0700) when missing. */
export function createPrivateDir(dir: string): void {
  mkdirSync(dirname(dir), { recursive: true });
  try {
    mkdirSync(dir, { mode: PRIVATE_DIR_MODE });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
}

/** Creates `path` empty with mode 0600 when missing (an existing file is left as it is). */
export function createPrivateFile(path: string): void {
  closeSync(openSync(path, 'a', PRIVATE_FILE_MODE));
}

/** Makes the entries of `dir` (a file created, renamed or linked in it) durable: an fsync of the directory. */
export function fsyncDir(dir: string): void {
  const fd = openSync(dir, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** An fsync of `fd` on libuv's thread pool: the event loop goes on while the disk writes. */
export function fsyncOffLoop(fd: number): Promise<void> {
  return new Promise((resolve, reject) => fsync(fd, (err) => (err ? reject(err) : resolve())));
}

/** fsyncDir on libuv's thread pool. */
export async function fsyncDirOffLoop(dir: string): Promise<void> {
  const fd = await new Promise<number>((resolve, reject) => open(dir, 'r', (err, opened) => (err ? reject(err) : resolve(opened))));
  try {
    await fsyncOffLoop(fd);
  } finally {
    await new Promise<void>((resolve) => close(fd, () => resolve()));
  }
}

/**
 * Creates `path` holding `content` (0600), whole or not at all, and durably: written to a temporary file beside it,
 * fsynced, linked to its name (so an existing file is never replaced: EEXIST, as `wx` gives), then the directory
 * fsynced. A crash or a full disk at any point leaves either no file or the whole one, never an empty or torn one.
 */
export function createFileDurably(path: string, content: string): void {
  removeDeadTemporaries(path);
  const temporary = `${path}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`;
  try {
    writeDurably(temporary, content);
    try {
      linkSync(temporary, path);
    } catch (err) {
      // A file system without hard links (some bind mounts): written in place, still fsynced, never replacing one.
      if (!NO_LINKS.has(String((err as NodeJS.ErrnoException).code))) throw err;
      writeDurably(path, content);
    }
  } finally {
    rmSync(temporary, { force: true });
  }
  fsyncDir(dirname(path));
}

const NO_LINKS = new Set(['EPERM', 'ENOTSUP', 'EOPNOTSUPP', 'ENOSYS', 'EXDEV']);

/** Creates `path` (never an existing one) holding `content`, 0600, fsynced. */
function writeDurably(path: string, content: string): void {
  const fd = openSync(path, 'wx', PRIVATE_FILE_MODE);
  try {
    const bytes = Buffer.from(content);
    for (let at = 0; at < bytes.length; ) at += writeSync(fd, bytes, at);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** The temporary files of createFileDurably left by a process that died before removing them (a key's copy, say). */
function removeDeadTemporaries(path: string): void {
  const prefix = `${basename(path)}.`;
  for (const name of readdirSync(dirname(path))) {
    const pid = new RegExp(`^${prefix.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}(\\d+)\\.[0-9a-f]+\\.tmp$`).exec(name)?.[1];
    if (pid === undefined || processAlive(Number(pid))) continue;
    rmSync(join(dirname(path), name), { force: true });
  }
}

function tighten(path: string, wanted: number, changes: PermissionChange[]): void {
  const mode = lstatSync(path).mode & 0o777;
  if ((mode & ~wanted) === 0) return;
  // Only bits are removed: a file the owner made read-only stays read-only.
  const next = mode & wanted;
  chmodSync(path, next);
  changes.push({ path, from: octal(mode), to: octal(next) });
}

function tightenTree(dir: string, changes: PermissionChange[]): void {
  tighten(dir, PRIVATE_DIR_MODE, changes);
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    // A symbolic link is not followed: what it points to is not ours to change.
    if (entry.isDirectory()) tightenTree(path, changes);
    else if (entry.isFile()) tighten(path, PRIVATE_FILE_MODE, changes);
  }
}

/**
 * Makes DATA_DIR private: creates it 0700 when missing, and removes group and other permissions from it and from
 * everything in it (files 0600, directories 0700). Returns what it changed, for the caller to log.
 */
export function securePrivateDataDir(dir: string): PermissionChange[] {
  createPrivateDir(dir);
  const changes: PermissionChange[] = [];
  tightenTree(dir, changes);
  return changes;
}

export const SERVER_LOCK_FILE = 'server.lock';

/** Another server process holds DATA_DIR. */
export class DataDirLockedError extends Error {
  override name = 'DataDirLockedError';
  constructor(readonly path: string) {
    super(`another server is running on this DATA_DIR (it holds ${path}); one server process per DATA_DIR`);
  }
}

export interface DataDirLock {
  path: string;
  release(): void;
}

/**
 * Takes the one-server-per-DATA_DIR lock: DATA_DIR/server.lock, a SQLite file held in exclusive locking mode after
 * a write. SQLite's lock is a POSIX advisory lock, which the kernel releases when the process dies however it dies
 * (kill -9, a container restart that reuses the pid), so there is never a stale lock to clear. A second opener gets
 * SQLITE_BUSY at once, which becomes DataDirLockedError. The CLI does not take it, so it runs beside the server.
 */
export function lockDataDir(dir: string, pid = process.pid, now = Date.now()): DataDirLock {
  try {
    return takeLock(dir, pid, now);
  } catch (err) {
    // A lock file torn by a crash during its first write (its pages half written): its content is only informative,
    // so it is emptied, which makes it a new empty database, and taken again. A live server's lock is never broken
    // so: its process still holds the lock itself, and the next try meets it (DataDirLockedError).
    if (!/^SQLITE_(CORRUPT|NOTADB)/.test(String((err as { code?: unknown }).code))) throw err;
    truncateSync(join(dir, SERVER_LOCK_FILE), 0);
    return takeLock(dir, pid, now);
  }
}

function takeLock(dir: string, pid: number, now: number): DataDirLock {
  const path = join(dir, SERVER_LOCK_FILE);
  createPrivateFile(path);
  const db = new Database(path, { timeout: 0 });
  try {
    // No journal file beside the lock; the lock's content (who holds it) is only informative.
    db.pragma('journal_mode = MEMORY');
    db.pragma('locking_mode = EXCLUSIVE');
    db.exec('BEGIN EXCLUSIVE');
    db.exec('CREATE TABLE IF NOT EXISTS holder (pid INTEGER NOT NULL, started_at INTEGER NOT NULL)');
    db.exec('DELETE FROM holder');
    db.prepare('INSERT INTO holder (pid, started_at) VALUES (?, ?)').run(pid, now);
    // After this commit the exclusive lock stays held (locking_mode = EXCLUSIVE) until the connection closes.
    db.exec('COMMIT');
  } catch (err) {
    db.close();
    if ((err as { code?: string }).code === 'SQLITE_BUSY') throw new DataDirLockedError(path);
    throw err;
  }
  return { path, release: () => db.close() };
}

/** Whether a process with this pid runs on this host (one of another user's counts: EPERM). */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
