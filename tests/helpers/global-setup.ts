import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * Builds dist/ once (as `npm run build` does), so the CLI and process tests spawn exactly what `npm start` and `npm run cli` run; and makes the
 * workers trust the webhook test CA (tests/fixtures/webhook-tls/ca.pem). Node reads NODE_EXTRA_CA_CERTS only when a
 * process starts, so it is set here, in the main process, before vitest forks the workers, which inherit process.env.
 * The variable points at a bundle of the test CAs (webhook receivers, customer Postgres) and any file the environment
 * already named there, named by its content and left in place (processes vitest starts after the teardown still read
 * it).
 */
export default function setup(): void {
  const root = fileURLToPath(new URL('../..', import.meta.url));
  // Every test CA: the webhook receivers' and the customer Postgres servers'.
  const testCas = ['../fixtures/webhook-tls/ca.pem', '../fixtures/pg-tls/ca.pem'].map((f) =>
    readFileSync(fileURLToPath(new URL(f, import.meta.url)), 'utf8').trimEnd(),
  );
  const inherited = process.env.NODE_EXTRA_CA_CERTS;
  let extra = '';
  if (inherited) {
    try {
      extra = readFileSync(inherited, 'utf8').trimEnd();
    } catch {
      // A missing file there is Node's warning to give, not ours: only the test CAs then.
    }
  }
  const text = `${[extra, ...testCas].filter(Boolean).join('\n')}\n`;
  const bundle = join(tmpdir(), `mailstead-test-ca-${createHash('sha256').update(text).digest('hex').slice(0, 16)}.pem`);
  if (!existsSync(bundle)) {
    const partial = `${bundle}.${process.pid}`;
    writeFileSync(partial, text);
    renameSync(partial, bundle);
  }
  process.env.NODE_EXTRA_CA_CERTS = bundle;
  execFileSync(process.execPath, ['node_modules/typescript/bin/tsc', '-p', 'tsconfig.json'], { cwd: root, stdio: 'inherit' });
  // The rest of `npm run build`: the dashboard's hashed browser assets.
  execFileSync(process.execPath, ['dist/scripts/build-dashboard.js'], { cwd: root, stdio: 'inherit' });
}
