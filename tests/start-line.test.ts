import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort } from '../scripts/lib/free-port.js';
import { loadConfig, mailHostnameProblem } from '../server/shared/config.js';
import { listenUrl, startLine } from '../server/app/start-line.js';
import { parsePrometheusText, sampleValue } from './helpers/prometheus-text.js';
import { processEnv, runningProcesses, startServiceProcess } from './helpers/service-process.js';
import { stateOnPostgres } from './helpers/test-state.js';

/**
 * What an operator reads at start: one `server.started` line naming the listening URLs, DATA_DIR,
 * the delivery mode and MAIL_HOSTNAME, and the warning when MAIL_HOSTNAME is not a fully qualified name; and the real
 * process's /metrics, which adds the process's own metrics to the service's.
 */

const dirs: string[] = [];
afterAll(() => {
  for (const child of runningProcesses) child.kill('SIGKILL');
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function newDataDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'mailstead-start-'));
  dirs.push(dir);
  return join(dir, 'data');
}

describe('startLine', () => {
  const config = loadConfig({ DATA_DIR: '/srv/mailstead', HTTP_HOST: '127.0.0.1', SMTP_HOST: '::', MAIL_HOSTNAME: 'mail.example.com' });

  it('the URLs that listen, DATA_DIR, the delivery mode (direct by default), MAIL_HOSTNAME and whether /metrics wants a token', () => {
    expect(startLine(config, { httpPort: 8080, smtpPort: 2525, submissionPort: 2587, submissionsPort: null })).toEqual({
      http: 'http://127.0.0.1:8080',
      smtp: 'smtp://[::]:2525',
      submissionPort: 2587,
      submissionsPort: null,
      dataDir: '/srv/mailstead',
      state: 'sqlite',
      deliveryMode: 'direct',
      relay: null,
      mailHostname: 'mail.example.com',
      metrics: 'open',
    });
  });

  it('with STATE_URL: the state on postgres, and its URL without the password', () => {
    const onPostgres = loadConfig({
      STATE_URL: 'postgresql://mail:s3cret-pw@db.example.com:6432/state',
      SECRET_KEY: 'ab'.repeat(32),
      SMTP_PORT: '0',
      SUBMISSION_PORT: '0',
      SUBMISSIONS_PORT: '0',
    });
    const line = startLine(onPostgres, { httpPort: 1, smtpPort: null, submissionPort: null, submissionsPort: null });
    expect(line).toMatchObject({ state: 'postgres', stateUrl: 'postgresql://mail:***@db.example.com:6432/state' });
    expect(JSON.stringify(line)).not.toContain('s3cret-pw');
  });

  it('smtp null when inbound is off (or could not listen)', () => {
    expect(startLine(config, { httpPort: 8080, smtpPort: null, submissionPort: null, submissionsPort: null })).toMatchObject({
      http: 'http://127.0.0.1:8080',
      smtp: null,
    });
  });

  it('the relay by scheme, host and port only: never its credentials', () => {
    const relayed = loadConfig({ SMTP_RELAY_URL: 'smtps://apikey:s3cr%40t-pass@smtp.relay.example:465', METRICS_TOKEN: 'metrics-token-0123456789' });
    const line = startLine(relayed, { httpPort: 1, smtpPort: null, submissionPort: null, submissionsPort: null });
    expect(line).toMatchObject({ deliveryMode: 'direct', relay: 'smtps://smtp.relay.example:465', metrics: 'token' });
    const text = JSON.stringify(line);
    for (const secret of ['apikey', 's3cr', 'metrics-token']) expect(text).not.toContain(secret);
  });

  it('DELIVERY_MODE=capture: the mode, and no relay even when SMTP_RELAY_URL is set (nothing leaves)', () => {
    const capture = loadConfig({ DELIVERY_MODE: 'capture', SMTP_RELAY_URL: 'smtp://relay.example:587' });
    expect(startLine(capture, { httpPort: 1, smtpPort: null, submissionPort: null, submissionsPort: null })).toMatchObject({
      deliveryMode: 'capture',
      relay: null,
    });
  });

  it('listenUrl brackets an IPv6 address only', () => {
    expect(listenUrl('http', '0.0.0.0', 80)).toBe('http://0.0.0.0:80');
    expect(listenUrl('http', '::1', 80)).toBe('http://[::1]:80');
    expect(listenUrl('smtp', 'localhost', 25)).toBe('smtp://localhost:25');
  });
});

describe('MAIL_HOSTNAME must be a fully qualified name (the config-level check behind the start warning)', () => {
  it.each(['localhost', 'vm', '192.0.2.10', 'mail.localhost'])('%s is not', (name) => {
    expect(mailHostnameProblem(name)).toContain(`"${name}"`);
  });

  it.each(['mail.example.com', 'mx-1.mail.example.co.uk'])('%s is', (name) => {
    expect(mailHostnameProblem(name)).toBeNull();
  });

  it('an IP literal or a name with characters a host name cannot have stops the start', () => {
    for (const name of ['[192.0.2.10]', '::1', 'mail_1.example.com', 'mail example.com', '-mail.example.com']) {
      expect(() => loadConfig({ MAIL_HOSTNAME: name }), name).toThrow(/MAIL_HOSTNAME/);
    }
  });
});

/** Where this run keeps the state of the processes it starts (npm test: SQLite; npm run test:postgres: Postgres). */
const ENGINE = stateOnPostgres() ? 'postgres' : 'sqlite';

describe('the real process at start', () => {
  it('logs server.started once it listens, warns that `localhost` is not a fully qualified name, and serves /metrics with its process metrics', async () => {
    const dataDir = newDataDir();
    const token = 'operator-metrics-token-42';
    const proc = await startServiceProcess(processEnv(dataDir, { MAIL_HOSTNAME: 'localhost', METRICS_TOKEN: token }));
    const entries = () => proc.logs.map((l) => JSON.parse(l) as Record<string, unknown>);
    for (let i = 0; i < 100 && !entries().some((e) => e.event === 'server.started'); i++) await new Promise((r) => setTimeout(r, 50));

    const started = entries().filter((e) => e.event === 'server.started');
    expect(started).toHaveLength(1);
    expect(started[0]).toMatchObject({
      level: 'info',
      http: `http://127.0.0.1:${proc.port}`,
      smtp: null,
      dataDir,
      state: ENGINE,
      deliveryMode: 'direct',
      relay: null,
      mailHostname: 'localhost',
      metrics: 'token',
    });
    const warnings = entries().filter((e) => e.event === 'config.mail_hostname_not_fqdn');
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ level: 'warn', mailHostname: 'localhost' });
    expect(entries().filter((e) => e.event === 'config.delivery_mode_capture')).toEqual([]);
    expect(proc.logs.join('\n')).not.toContain(token);
    expect(await (await fetch(`http://127.0.0.1:${proc.port}/healthz`)).json()).toEqual({ status: 'ok', deliveryMode: 'direct', state: ENGINE });

    expect((await fetch(`http://127.0.0.1:${proc.port}/metrics`)).status).toBe(401);
    const res = await fetch(`http://127.0.0.1:${proc.port}/metrics`, { headers: { authorization: `Bearer ${token}` } });
    expect(res.status).toBe(200);
    const families = parsePrometheusText(await res.text());
    expect(sampleValue(families, 'process_resident_memory_bytes')).toBeGreaterThan(0);
    expect(families.get('nodejs_eventloop_lag_seconds')?.type).toBe('gauge');
    expect(sampleValue(families, 'mailstead_http_requests_total', { method: 'GET', route: '/metrics', status: '401' })).toBe(1);

    proc.child.kill('SIGTERM');
    expect((await proc.exited).code).toBe(0);
  });

  it('DELIVERY_MODE=capture: the start line says capture, a warning says nothing leaves the machine, /healthz says the mode; no MAIL_HOSTNAME warning', async () => {
    const dataDir = newDataDir();
    // A short MAIL_HOSTNAME is a production warning: capture mode (npm run dev) sends nothing, so it draws none.
    const proc = await startServiceProcess(processEnv(dataDir, { DELIVERY_MODE: 'capture', MAIL_HOSTNAME: 'localhost' }));
    const entries = () => proc.logs.map((l) => JSON.parse(l) as Record<string, unknown>);
    for (let i = 0; i < 100 && !entries().some((e) => e.event === 'server.started'); i++) await new Promise((r) => setTimeout(r, 50));
    expect(entries().filter((e) => e.event === 'server.started')).toEqual([expect.objectContaining({ deliveryMode: 'capture', relay: null })]);
    const warnings = entries().filter((e) => e.event === 'config.delivery_mode_capture');
    expect(warnings).toEqual([expect.objectContaining({ level: 'warn', message: expect.stringContaining('no mail leaves this machine') })]);
    expect(entries().filter((e) => e.event === 'config.mail_hostname_not_fqdn')).toEqual([]);
    const health = await fetch(`http://127.0.0.1:${proc.port}/healthz`);
    expect(health.status).toBe(200);
    expect(await health.json()).toEqual({ status: 'ok', deliveryMode: 'capture', state: ENGINE });
    proc.child.kill('SIGTERM');
    expect((await proc.exited).code).toBe(0);
  });

  it('inbound on: the line names the SMTP URL; a fully qualified MAIL_HOSTNAME draws no warning', async () => {
    const dataDir = newDataDir();
    const port = await freePort();
    const inbound = await startServiceProcess(processEnv(dataDir, { MAIL_HOSTNAME: 'mail.example.com', SMTP_HOST: '127.0.0.1', SMTP_PORT: String(port) }));
    const entries = () => inbound.logs.map((l) => JSON.parse(l) as Record<string, unknown>);
    for (let i = 0; i < 200 && !entries().some((e) => e.event === 'server.started'); i++) await new Promise((r) => setTimeout(r, 50));
    expect(entries().filter((e) => e.event === 'server.started')).toEqual([
      expect.objectContaining({
        http: `http://127.0.0.1:${inbound.port}`,
        smtp: `smtp://127.0.0.1:${port}`,
        mailHostname: 'mail.example.com',
        metrics: 'open',
      }),
    ]);
    expect(entries().filter((e) => e.event === 'config.mail_hostname_not_fqdn')).toEqual([]);
    inbound.child.kill('SIGTERM');
    expect((await inbound.exited).code).toBe(0);
  });
});
