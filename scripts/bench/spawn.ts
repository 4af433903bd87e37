import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';

/**
 * The flags `npm start` (and the Docker image) give node before dist/server/app/main.js, read from package.json, so the
 * benchmarks run the service as production does; and BENCH_NODE_ARGS, for a profile of the service in a benchmark
 * (`BENCH_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof"`: Node refuses --cpu-prof in NODE_OPTIONS).
 */
export function serviceNodeFlags(): string[] {
  const pkg = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { scripts: { start: string } };
  const m = /^node((?: --\S+)*) dist\/server\/app\/main\.js$/.exec(pkg.scripts.start);
  if (!m) throw new Error(`package.json start is not "node [flags] dist/server/app/main.js": ${pkg.scripts.start}`);
  return [...m[1]!.split(' '), ...(process.env.BENCH_NODE_ARGS ?? '').split(' ')].filter(Boolean);
}

/** Spawns a node script that logs a JSON `http.listening` line with its port; resolves with the child and port. */
export async function spawnListening(script: string, env: Record<string, string>, nodeArgs: string[] = []): Promise<{ child: ChildProcess; port: number }> {
  const child = spawn(process.execPath, [...nodeArgs, script], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
  const lines = createInterface({ input: child.stdout! });
  const port = await new Promise<number>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`${script} exited with ${code}`)));
    lines.on('line', (line) => {
      try {
        const entry = JSON.parse(line) as { event?: string; port?: number };
        if (entry.event === 'http.listening' && entry.port) resolve(entry.port);
      } catch {
        // not a log line
      }
    });
  });
  return { child, port };
}

/** SIGTERM, resolved once the child has exited (at once if it already has, by exit or by a signal). */
export function stop(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}
