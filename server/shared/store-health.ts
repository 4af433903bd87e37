import type { Clock } from './clock.js';
import { ApiError } from './errors.js';
import type { LogFields, Logger } from './logger.js';

/**
 * Whether the service's own store can be trusted, for /healthz: `select 1` never reads the database file, and a
 * damaged page, a full disk or a failing device fails only the work that touches it. So every part of the service
 * that writes or reads the store (API requests, the group commit, the delivery engine, the webhook dispatcher, the
 * customer-database writer, inbound SMTP) hands its failures to `note`; /healthz answers 503 for STORE_FAULT_WINDOW_MS
 * after the last one that was the store's.
 */

/** How long /healthz answers 503 after a failure on the store. */
export const STORE_FAULT_WINDOW_MS = 60_000;

/**
 * SQLite's codes for a store that cannot be trusted or written (a damaged file, not a database, an I/O error, a full
 * disk, a file it cannot open, a connection closed to writes after a failed flush), and the system's for a write or
 * flush of DATA_DIR that failed (the WAL's fdatasync, the inbound spool). Constraint and busy errors, refusals and
 * network errors are about one piece of work, not the store.
 */
export function storeFaultOf(err: unknown): boolean {
  return /^(SQLITE_(CORRUPT|NOTADB|IOERR|FULL|CANTOPEN|READONLY)|EIO$|ENOSPC$|EROFS$|EDQUOT$)/.test(codeOf(err));
}

/** The error's code, or its cause's (drizzle wraps SQLite's errors of a `db.run(sql...)` in a DrizzleError). */
function codeOf(err: unknown): string {
  const e = err as { code?: unknown; cause?: { code?: unknown } } | null;
  const code = e?.code ?? e?.cause?.code;
  return typeof code === 'string' ? code : '';
}

/** What failed, in the operator's words, by the code of a store fault (the first that matches). */
const STORE_FAULT_CAUSES: readonly (readonly [RegExp, string])[] = [
  [/^(SQLITE_FULL|ENOSPC$|EDQUOT$)/, 'its storage is full (no space left for DATA_DIR)'],
  [/^(SQLITE_READONLY|EROFS$)/, 'its storage is read-only'],
  [/^(SQLITE_CORRUPT|SQLITE_NOTADB)/, 'its database file is damaged'],
  [/^SQLITE_CANTOPEN/, 'its database file cannot be opened'],
  [/^(SQLITE_IOERR|EIO$)/, 'its storage failed to read or write (an I/O error)'],
];

const CLOSED_CAUSE = 'its storage stopped taking writes after a write to disk failed (it takes them again once the service is restarted)';

/**
 * The answer to a request that could not be recorded because the store failed (docs/api/decisions.md section 13): 503
 * `unavailable` naming the cause; `outcome` says what that left (a send: nothing was sent). Null when `err` is not
 * the store's, unless the store is closed to writes (`closed`), which is the cause whatever the error says.
 */
export function storeUnavailable(err: unknown, opts: { closed?: boolean; outcome?: string } = {}): ApiError | null {
  const code = codeOf(err);
  const cause = opts.closed
    ? CLOSED_CAUSE
    : storeFaultOf(err)
      ? (STORE_FAULT_CAUSES.find(([pattern]) => pattern.test(code))?.[1] ?? 'its storage failed')
      : null;
  if (cause === null) return null;
  return new ApiError('unavailable', `The service could not record this request: ${cause}.${opts.outcome ? ` ${opts.outcome}.` : ''} Retry later.`);
}

/** SQLite's own fsync of the database or its WAL failed (inside a commit with synchronous=FULL). */
export function isFlushFailure(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === 'SQLITE_IOERR_FSYNC' || code === 'SQLITE_IOERR_DIR_FSYNC';
}

export interface StoreHealth {
  /** Any failure; only the store's count. */
  note(err: unknown): void;
  /** The store takes no more writes (a flush of its WAL failed): faulty until the process restarts. */
  markUnsafe(err: unknown): void;
  /** True within STORE_FAULT_WINDOW_MS of the last failure on the store, and for good once it is unsafe. */
  faulty(): boolean;
  /** True once the store takes no more writes (markUnsafe). */
  unsafe(): boolean;
}

export interface StoreHealthOptions {
  /** Called after `note` is handed a failed flush of SQLite's (isFlushFailure): the store can no longer take writes. */
  onFlushFailure?: (err: unknown) => void;
}

export function createStoreHealth(clock: Clock, options: StoreHealthOptions = {}): StoreHealth {
  let faultAt: number | null = null;
  let unsafe = false;
  return {
    note(err) {
      if (storeFaultOf(err)) faultAt = clock.monotonic();
      if (options.onFlushFailure && isFlushFailure(err)) options.onFlushFailure(err);
    },
    markUnsafe() {
      unsafe = true;
    },
    faulty() {
      return unsafe || (faultAt !== null && clock.monotonic() - faultAt < STORE_FAULT_WINDOW_MS);
    },
    unsafe() {
      return unsafe;
    },
  };
}

/** A failure of work no request waits for: noted for /healthz (when it is the store's) and logged as `event`. */
export function logFailure(deps: { storeHealth: StoreHealth; logger: Logger }, event: string, err: unknown, fields: LogFields = {}): void {
  deps.storeHealth.note(err);
  deps.logger.error(event, { ...fields, err });
}
