import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { expect } from 'vitest';
import { createAccountWithCli, processApi, processEnv, startServiceProcess } from './service-process.js';

/**
 * A real server process (dist/server/app/main.js) on a fresh DATA_DIR with an account and one webhook endpoint, and its
 * database file opened beside it (busy_timeout set), for tests that kill the process mid-request.
 */
export async function processWithEndpoint(accountName: string) {
  const dataDir = mkdtempSync(join(tmpdir(), 'mailstead-webhook-process-'));
  let file: Database.Database | undefined;
  try {
    const env = processEnv(dataDir);
    const proc = await startServiceProcess(env);
    const { accountId, key } = await createAccountWithCli(env, accountName);
    const created = await processApi(proc, key, 'POST', '/webhooks', { url: 'https://127.0.0.1:9/hook', events: ['email.delivered'] });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    file = new Database(join(dataDir, 'mailstead.db'));
    file.pragma('busy_timeout = 5000');
    const opened = file;
    return {
      env,
      proc,
      accountId,
      key,
      endpointId: created.body.id as string,
      file: opened,
      close(): void {
        opened.close();
        rmSync(dataDir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    file?.close();
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
  begun: () => boolean,
): Promise<string> {
  const answer = request.then(
    (res) => `answered ${res.status}`,
    () => 'no answer',
  );
  while (!begun()) await new Promise((r) => setTimeout(r, 2));
  proc.child.kill('SIGKILL');
  await proc.exited;
  return answer;
}
