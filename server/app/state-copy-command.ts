import { DatabaseMissingError, databasePath, hasDatabase, openDatabase } from '../../db/client.js';
import { DataDirLockedError, lockDataDir } from '../../db/data-dir.js';
import { openPostgres } from '../../db/pg/state.js';
import { type CopyReport, copyState } from '../../db/state-copy.js';
import type { Config } from '../shared/config.js';
import { parseStateUrl, type StateTarget } from '../shared/state-url.js';
import { pgTargetOf } from './state.js';

/**
 * `mailstead state copy --to postgresql://... [--dry-run]` (docs/api/decisions.md section 11, docs/operating/upgrading.md):
 * a stopped server's DATA_DIR into an empty Postgres. It holds DATA_DIR's server lock while it runs, so a server
 * cannot start on it meanwhile, and it refuses to run beside one.
 */

/** `--to` is not a STATE_URL this version takes (a usage error of the command line). */
export class StateCopyRefused extends Error {
  override name = 'StateCopyRefused';
}

export interface StateCopyResult extends CopyReport {
  from: string;
  to: string;
  next: string;
}

export async function runStateCopy(config: Config, opts: { to: string; dryRun: boolean }): Promise<StateCopyResult> {
  let target: StateTarget;
  try {
    target = parseStateUrl(opts.to);
  } catch (err) {
    throw new StateCopyRefused(`--to ${err instanceof Error ? err.message : String(err)}`);
  }
  if (!hasDatabase(config.dataDir)) throw new DatabaseMissingError(databasePath(config.dataDir));
  let lock: ReturnType<typeof lockDataDir>;
  try {
    lock = lockDataDir(config.dataDir);
  } catch (err) {
    if (err instanceof DataDirLockedError) throw new Error(`${err.message}: stop the server before copying its state`);
    throw err;
  }
  try {
    const source = openDatabase(config.dataDir, { mustExist: true });
    try {
      const pgStore = await openPostgres(pgTargetOf(target), { poolSize: 2 });
      try {
        // The spool files of the queued writes go along, as rows: the Postgres node needs nothing of DATA_DIR.
        const report = await copyState(source.sqlite, pgStore.pool, { dryRun: opts.dryRun, dataDir: config.dataDir });
        return {
          ...report,
          from: databasePath(config.dataDir),
          to: target.shown,
          next: opts.dryRun
            ? 'Nothing was written. Run again without --dry-run to copy.'
            : 'Start Mailstead with STATE_URL set to this URL and SECRET_KEY set to the key in DATA_DIR/secret.key (or the SECRET_KEY it ran with): the secrets copied are sealed with it. DATA_DIR holds nothing it needs; keep it until the new server runs.',
        };
      } finally {
        await pgStore.close();
      }
    } finally {
      source.close();
    }
  } finally {
    lock.release();
  }
}
