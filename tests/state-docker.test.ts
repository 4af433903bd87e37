import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

/**
 * The image's recipe, read as text (no Docker engine here): the runtime holds no file capability (node must still
 * start under --cap-drop=ALL), it runs what the README and CI run, and the build context leaves local state, keys
 * and logs behind while keeping every source file the build needs.
 */

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const dockerfile = readFileSync(join(ROOT, 'Dockerfile'), 'utf8');
const dockerignore = readFileSync(join(ROOT, '.dockerignore'), 'utf8');

/** The Dockerfile's instructions, continuation lines joined, comments dropped. */
const instructions = dockerfile
  .replace(/\\\n/g, ' ')
  .split('\n')
  .map((l) => l.trim())
  .filter((l) => l !== '' && !l.startsWith('#'));
const runtimeStage = instructions.slice(instructions.findLastIndex((l) => l.startsWith('FROM ')));

/**
 * Docker's .dockerignore matching (moby/patternmatcher): a pattern is matched against the path from the context's
 * root, `**` spans any number of directories (none included), `*` and `?` stay within one name, a match on a
 * directory excludes everything under it, and a later `!pattern` re-includes.
 */
function ignoredBy(patterns: string[], path: string): boolean {
  const toRegex = (pattern: string) => {
    let re = '';
    for (let i = 0; i < pattern.length; i++) {
      const c = pattern[i]!;
      if (c === '*' && pattern[i + 1] === '*') {
        i++;
        if (pattern[i + 1] === '/') {
          i++;
          re += '(?:.*/)?';
        } else re += '.*';
      } else if (c === '*') re += '[^/]*';
      else if (c === '?') re += '[^/]';
      else re += c.replace(/[.+^${}()|[\]\\]/g, '\\$&');
    }
    return new RegExp(`^${re}(?:/.*)?$`);
  };
  let ignored = false;
  for (const raw of patterns) {
    const negate = raw.startsWith('!');
    const pattern = (negate ? raw.slice(1) : raw).replace(/^\/+/, '').replace(/\/+$/, '');
    if (toRegex(pattern).test(path)) ignored = !negate;
  }
  return ignored;
}

const patterns = dockerignore
  .split('\n')
  .map((l) => l.trim())
  .filter((l) => l !== '' && !l.startsWith('#'));

describe('Dockerfile', () => {
  it('gives node no file capability: no setcap, no libcap, no cap_net_bind_service', () => {
    expect(instructions.join('\n')).not.toMatch(/setcap|libcap|cap_net_bind_service|getcap/i);
  });

  it('runs as the unprivileged node user, the same commands as the README and CI: npm ci, npm run build, node dist/server/app/main.js', () => {
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
    const runs = instructions.filter((l) => l.startsWith('RUN ')).join('\n');
    expect(runs).toContain('npm ci');
    expect(runs).toContain('npm run build');
    expect(runtimeStage).toContain('USER node');
    const cmd = runtimeStage.find((l) => l.startsWith('CMD '));
    expect(cmd).toBeDefined();
    expect((JSON.parse(cmd!.slice(4)) as string[]).join(' ')).toBe(pkg.scripts.start);
    expect(runtimeStage.some((l) => l.startsWith('HEALTHCHECK ') && l.includes('dist/server/app/healthcheck.js'))).toBe(true);
  });
});

describe('.dockerignore', () => {
  it('the matcher reads patterns as Docker does', () => {
    expect(ignoredBy(['data'], 'data/mailstead.db')).toBe(true);
    expect(ignoredBy(['data'], 'server/data/x')).toBe(false);
    expect(ignoredBy(['**/*.db'], 'mailstead.db')).toBe(true);
    expect(ignoredBy(['**/*.db'], 'a/b/mailstead.db')).toBe(true);
    expect(ignoredBy(['*.db'], 'a/mailstead.db')).toBe(false);
    expect(ignoredBy(['data-*'], 'dashboard/index.ts')).toBe(false);
    expect(ignoredBy(['**/*.key', '!keep.key'], 'keep.key')).toBe(false);
  });

  it.each([
    'data/mailstead.db',
    'data/mailstead.db-wal',
    'data/secret.key',
    'data-old/mailstead.db',
    'data-2026/secret.key',
    'mailstead.db',
    'backup/mailstead.db',
    'backup/mailstead.db-wal',
    'backup/mailstead.db-shm',
    'backup/server.lock',
    'secret.key',
    'tls/smtp.key',
    'tls/smtp.pem',
    'server.log',
    'logs/mailstead.log',
    '.env',
    '.env.production',
    'deploy/.env.local',
    'dist/server/app/main.js',
    'node_modules/hono/package.json',
    'coverage/index.html',
    '.git/HEAD',
  ])('leaves %s out of the build context', (path) => {
    expect(ignoredBy(patterns, path)).toBe(true);
  });

  it('keeps every tracked file the build needs: package files, tsconfig and every source file it compiles', () => {
    const tracked = execFileSync('git', ['ls-files'], { cwd: ROOT, encoding: 'utf8' }).split('\n').filter(Boolean);
    const needed = tracked.filter((p) => /^(server|mta|db|dashboard|scripts)\//.test(p) || ['package.json', 'package-lock.json', 'tsconfig.json'].includes(p));
    expect(needed.length).toBeGreaterThan(50);
    expect(needed).toContain('db/migrations/meta/_journal.json');
    expect(needed.filter((p) => ignoredBy(patterns, p))).toEqual([]);
  });
});

describe('the CLI in the image', () => {
  it('runs as `npm run -s cli` from a production install (no TypeScript to build with), as the start line tells the operator', async () => {
    // The image's /app: package.json, the built dist and the production dependencies only (npm prune --omit=dev).
    const app = mkdtempSync(join(tmpdir(), 'ms-image-'));
    copyFileSync(join(ROOT, 'package.json'), join(app, 'package.json'));
    symlinkSync(join(ROOT, 'dist'), join(app, 'dist'));
    symlinkSync(join(ROOT, 'db'), join(app, 'db'));
    mkdirSync(join(app, 'node_modules'));
    for (const entry of readdirSync(join(ROOT, 'node_modules'))) {
      if (entry === 'typescript' || entry === '.bin') continue;
      symlinkSync(join(ROOT, 'node_modules', entry), join(app, 'node_modules', entry));
    }
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };
    const out = execFileSync('npm', ['run', '-s', 'cli', '--', '--version'], {
      cwd: app,
      encoding: 'utf8',
      env: { ...process.env, DATA_DIR: join(app, 'data') },
    });
    expect(out).toBe(`${pkg.version}\n`);
  }, 60_000);
});
