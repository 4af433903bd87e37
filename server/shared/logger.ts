import type { LogLevel } from './config.js';

export type LogFields = Record<string, unknown>;

/** Structured JSON logs with a stable event name, one object per line. */
export interface Logger {
  debug(event: string, fields?: LogFields): void;
  info(event: string, fields?: LogFields): void;
  warn(event: string, fields?: LogFields): void;
  error(event: string, fields?: LogFields): void;
}

const RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

function serialise(value: unknown): unknown {
  if (value instanceof Error) return { name: value.name, message: value.message, stack: value.stack };
  return value;
}

/** How long a line may wait for company before the held lines are written. */
export const LOG_FLUSH_MS = 10;
/** Held lines this large are written at once. */
export const LOG_FLUSH_BYTES = 64 * 1024;

/**
 * Writes to stdout at most every LOG_FLUSH_MS (or once LOG_FLUSH_BYTES are held) instead of once per line: stdout is
 * synchronous for files and pipes on Linux, and each write wakes whoever reads the pipe (Docker's log driver), which
 * costs the server tens of microseconds; a busy server logs a line per SMTP message, per request, per delivery.
 * Whatever is held is written before the process exits, however it exits (an uncaught error's line included).
 */
export function stdoutBatched(out: { write(chunk: string): unknown } = process.stdout): ((line: string) => void) & { flush(): void } {
  let held: string[] = [];
  let bytes = 0;
  let timer: NodeJS.Timeout | null = null;
  const flush = () => {
    if (timer) clearTimeout(timer);
    timer = null;
    if (held.length === 0) return;
    const text = held.join('');
    held = [];
    bytes = 0;
    out.write(text);
  };
  process.on('exit', flush);
  const write = (line: string) => {
    held.push(line);
    bytes += line.length;
    if (bytes >= LOG_FLUSH_BYTES) flush();
    else if (!timer) timer = setTimeout(flush, LOG_FLUSH_MS).unref();
  };
  // Writes what is held now: for a line that must be out before something else is said (main's start line).
  return Object.assign(write, { flush });
}

export function createLogger(
  level: LogLevel,
  write: (line: string) => void = stdoutBatched(),
  /** Fields every line carries after its event (the node's name, with several nodes). */
  base: LogFields = {},
): Logger {
  const min = RANK[level];
  const log =
    (lvl: LogLevel) =>
    (event: string, fields: LogFields = {}) => {
      if (RANK[lvl] < min) return;
      const entry: LogFields = { time: new Date().toISOString(), level: lvl, event, ...base };
      for (const [k, v] of Object.entries(fields)) entry[k] = serialise(v);
      write(`${JSON.stringify(entry)}\n`);
    };
  return { debug: log('debug'), info: log('info'), warn: log('warn'), error: log('error') };
}

/** A logger that keeps its entries, for tests and the CLI (whose stdout is reserved for JSON results). */
export function createMemoryLogger(): Logger & { entries: LogFields[] } {
  const entries: LogFields[] = [];
  const push =
    (level: LogLevel) =>
    (event: string, fields: LogFields = {}) => {
      entries.push({ level, event, ...fields });
    };
  return { entries, debug: push('debug'), info: push('info'), warn: push('warn'), error: push('error') };
}
