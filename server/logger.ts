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

export function createLogger(level: LogLevel, write: (line: string) => void = (l) => process.stdout.write(l)): Logger {
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
