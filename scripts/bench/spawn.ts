import { type ChildProcess, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';

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

export function stop(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}
