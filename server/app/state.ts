import { openDatabase, type Store } from '../../db/client.js';
import { openPostgres, type PgTarget } from '../../db/pg/state.js';
import type { Config } from '../shared/config.js';
import type { StateTarget } from '../shared/state-url.js';

/**
 * The service's state where the configuration puts it (docs/api/decisions.md section 11): SQLite in DATA_DIR, or the
 * Postgres STATE_URL names, migrated at open (under an advisory lock) and refused when a newer version migrated it.
 */
export async function openStore(config: Config): Promise<Store> {
  if (config.state.engine === 'postgres') return openPostgres(pgTargetOf(config.state.target), { poolSize: STATE_POOL_SIZE });
  return openDatabase(config.dataDir);
}

/** Connections to the state database a server keeps at most: the workers, the API and the dashboard share them. */
export const STATE_POOL_SIZE = 10;

/** What node-postgres is given for a parsed STATE_URL. */
export function pgTargetOf(target: StateTarget): PgTarget {
  return {
    host: target.host,
    port: target.port,
    database: target.database,
    user: target.user,
    password: target.password,
    ssl: target.ssl === false ? false : { rejectUnauthorized: target.ssl.verify, ...(target.ssl.ca ? { ca: target.ssl.ca } : {}) },
  };
}

/** The engine and where it is, for the start line and the CLI: never the password. */
export function stateShown(config: Config): { engine: 'sqlite' | 'postgres'; at: string } {
  return config.state.engine === 'postgres' ? { engine: 'postgres', at: config.state.target.shown } : { engine: 'sqlite', at: config.dataDir };
}
