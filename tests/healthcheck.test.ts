import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { healthzUrl } from '../server/app/healthcheck.js';
import { ROOT, processEnv, runningProcesses, startServiceProcess } from './helpers/service-process.js';

/**
 * The image's HEALTHCHECK, run as Docker runs it: the command of the Dockerfile's HEALTHCHECK line, in the image's
 * working directory, with the container's environment. It must find the server wherever HTTP_HOST and HTTP_PORT put
 * it, and fail when nothing answers.
 */

const dockerfile = readFileSync(join(ROOT, 'Dockerfile'), 'utf8').replace(/\\\n/g, ' ');
const healthcheckLine = dockerfile.split('\n').find((l) => l.startsWith('HEALTHCHECK '));
const command = JSON.parse(/CMD (\[.*\])\s*$/.exec(healthcheckLine ?? '')?.[1] ?? 'null') as string[] | null;

function runHealthcheck(env: Record<string, string>): Promise<{ code: number | null; stderr: string }> {
  const [file, ...args] = command!;
  return new Promise((resolve, reject) => {
    // `node` as the image's PATH finds it: the test's own Node binary.
    const child = spawn(file === 'node' ? process.execPath : file!, args, { cwd: ROOT, env, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stderr }));
  });
}

afterAll(() => {
  for (const child of runningProcesses) child.kill('SIGKILL');
});

describe('the Dockerfile HEALTHCHECK', () => {
  it('is an exec-form command', () => {
    expect(command).not.toBeNull();
    expect(command!.length).toBeGreaterThan(0);
  });

  it.each([['0.0.0.0'], ['127.0.0.2'], ['::1']])(
    'finds the server listening on HTTP_HOST=%s, and fails once it stops',
    async (host) => {
      const env = processEnv(mkdtempSync(join(tmpdir(), 'ms-health-')), { HTTP_HOST: host });
      const service = await startServiceProcess(env);
      // The container's environment names the port the server took.
      const containerEnv = { ...env, HTTP_PORT: String(service.port) };
      const healthy = await runHealthcheck(containerEnv);
      expect(healthy.code, healthy.stderr).toBe(0);

      service.child.kill('SIGTERM');
      await service.exited;
      const down = await runHealthcheck(containerEnv);
      expect(down.code).toBe(1);
      expect(down.stderr).toContain('/healthz');
      expect(down.stderr).toContain('ECONNREFUSED');
    },
    60_000,
  );

  it('says why when the environment does not name a port it can reach', async () => {
    const env = processEnv(mkdtempSync(join(tmpdir(), 'ms-health-')), { HTTP_PORT: '0' });
    const res = await runHealthcheck(env);
    expect(res.code).toBe(1);
    expect(res.stderr).toContain('HTTP_PORT');
  });
});

describe('healthzUrl', () => {
  it('reaches a wildcard through loopback and brackets IPv6', () => {
    expect(healthzUrl('0.0.0.0', 8080)).toBe('http://127.0.0.1:8080/healthz');
    expect(healthzUrl('::', 8080)).toBe('http://[::1]:8080/healthz');
    expect(healthzUrl('10.1.2.3', 80)).toBe('http://10.1.2.3:80/healthz');
    expect(healthzUrl('fd00::5', 8080)).toBe('http://[fd00::5]:8080/healthz');
    expect(healthzUrl('localhost', 8080)).toBe('http://localhost:8080/healthz');
  });
});
