import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'vitest';
import { type Db, openDatabase } from '../../db/client.js';
import { openPostgres } from '../../db/pg/state.js';
import { pgTargetOf } from '../../server/app/state.js';
import { parseStateUrl } from '../../server/shared/state-url.js';
import { createAccountWithCli, processApi, processEnv, startServiceProcess } from './service-process.js';

/**
 * The state of a running server process, opened beside it: its DATA_DIR's SQLite file (busy_timeout set), or on a
 * Postgres run the state database its STATE_URL names. `db` is the product's handle on it (db/client.ts), so a test
 * reads and writes the same tables on either engine.
 */
async function openStateBeside(env: Record<string, string>, dataDir: string): Promise<{ db: Db; close(): Promise<void> }> {
  if (env.STATE_URL) {
    const store = await openPostgres(pgTargetOf(parseStateUrl(env.STATE_URL)), { poolSize: 2 });
    return { db: store.db, close: () => store.close() };
  }
  const store = openDatabase(dataDir, { mustExist: true });
  return {
    db: store.db,
    close: async () => {
      store.close();
    },
  };
}

/**
 * A real server process (dist/server/app/main.js) on a fresh DATA_DIR with an account and one webhook endpoint, and its
 * state opened beside it, for tests that kill the process mid-request.
 */
export async function processWithEndpoint(accountName: string) {
  const dataDir = mkdtempSync(join(tmpdir(), 'mailstead-webhook-process-'));
  let state: Awaited<ReturnType<typeof openStateBeside>> | undefined;
  try {
    const env = processEnv(dataDir);
    const proc = await startServiceProcess(env);
    const { accountId, key } = await createAccountWithCli(env, accountName);
    const created = await processApi(proc, key, 'POST', '/webhooks', { url: 'https://127.0.0.1:9/hook', events: ['email.delivered'] });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    state = await openStateBeside(env, dataDir);
    const opened = state;
    return {
      env,
      proc,
      accountId,
      key,
      endpointId: created.body.id as string,
      db: opened.db,
      async close(): Promise<void> {
        await opened.close();
        rmSync(dataDir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    await state?.close();
    rmSync(dataDir, { recursive: true, force: true });
    throw err;
  }
}

/**
 * Sends a request, kills the process with SIGKILL once `begun()` says its work has started, and tells whether the
 * request was answered (`answered <status>`) or not (`no answer`).
 */
export async function killMidRequest(
  proc: Awaited<ReturnType<typeof startServiceProcess>>,
  request: Promise<{ status: number }>,
  begun: () => Promise<boolean>,
): Promise<string> {
  const answer = request.then(
    (res) => `answered ${res.status}`,
    () => 'no answer',
  );
  while (!(await begun())) await new Promise((r) => setTimeout(r, 2));
  proc.child.kill('SIGKILL');
  await proc.exited;
  return answer;
}
