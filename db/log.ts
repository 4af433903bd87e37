/**
 * What db/ writes to the service's log, passed in by its caller: the shape of server/shared/logger.ts's Logger, declared
 * here because db/ imports nothing above it.
 */
export interface DbLogger {
  info(event: string, fields?: Record<string, unknown>): void;
  warn(event: string, fields?: Record<string, unknown>): void;
  error(event: string, fields?: Record<string, unknown>): void;
}
