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

/**
 * Writes to stdout once per turn of the event loop instead of once per line: stdout is synchronous for files and
 * pipes on Linux, and a busy server logs several lines a turn (each SMTP message, each request). Whatever is held is
 * written before the process exits, however it exits (an uncaught error's line included).
 */
export function stdoutBatched(out: { write(chunk: string): unknown } = process.stdout): (line: string) => void {
  let held: string[] = [];
  const flush = () => {
    if (held.length === 0) return;
    const text = held.join('');
    held = [];
    out.write(text);
  };
  process.on('exit', flush);
  return (line) => {
    if (held.length === 0) setImmediate(flush);
    held.push(line);
  };
}

export function createLogger(level: LogLevel, write: (line: string) => void = stdoutBatched()): Logger {
  const min = RANK[level];
  const log = (lvl: LogLevel) => (event: string, fields: LogFields = {}) => {
    if (RANK[lvl] < min) return;
    const entry: LogFields = { time: new Date().toISOString(), level: lvl, event };
    for (const [k, v] of Object.entries(fields)) entry[k] = serialise(v);
    write(`${JSON.stringify(entry)}\n`);
  };
  return { debug: log('debug'), info: log('info'), warn: log('warn'), error: log('error') };
}

/** A logger that keeps its entries, for tests and the CLI (whose stdout is reserved for JSON results). */
export function createMemoryLogger(): Logger & { entries: LogFields[] } {
  const entries: LogFields[] = [];
  const push = (level: LogLevel) => (event: string, fields: LogFields = {}) => {
    entries.push({ level, event, ...fields });
  };
  return { entries, debug: push('debug'), info: push('info'), warn: push('warn'), error: push('error') };
}
