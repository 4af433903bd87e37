import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * Builds dist/ once, so the CLI and process tests spawn exactly what `npm start` and `npm run cli` run; and makes the
 * workers trust the webhook test CA (tests/fixtures/webhook-tls/ca.pem). Node reads NODE_EXTRA_CA_CERTS only when a
 * process starts, so it is set here, in the main process, before vitest forks the workers, which inherit process.env.
 * A file the environment already named there is kept: the variable then points at a bundle of both, named by its
 * content and left in place (processes vitest starts after the teardown still read it).
 */
export default function setup(): void {
  const root = fileURLToPath(new URL('../..', import.meta.url));
  const testCa = fileURLToPath(new URL('../fixtures/webhook-tls/ca.pem', import.meta.url));
  const inherited = process.env.NODE_EXTRA_CA_CERTS;
  if (inherited && inherited !== testCa) {
    let extra = '';
    try {
      extra = readFileSync(inherited, 'utf8').trimEnd();
    } catch {
      // A missing file there is Node's warning to give, not ours: only the test CA then.
    }
    const text = `${extra}${extra ? '\n' : ''}${readFileSync(testCa, 'utf8')}`;
    const bundle = join(tmpdir(), `mailstead-test-ca-${createHash('sha256').update(text).digest('hex').slice(0, 16)}.pem`);
    if (!existsSync(bundle)) {
      const partial = `${bundle}.${process.pid}`;
      writeFileSync(partial, text);
      renameSync(partial, bundle);
    }
    process.env.NODE_EXTRA_CA_CERTS = bundle;
  } else {
    process.env.NODE_EXTRA_CA_CERTS = testCa;
  }
  execFileSync(process.execPath, ['node_modules/typescript/bin/tsc', '-p', 'tsconfig.json'], { cwd: root, stdio: 'inherit' });
}
