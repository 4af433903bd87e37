import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Hono } from 'hono';
import type { DashEnv } from './env.js';

/** The browser files `npm run build` makes (scripts/build-dashboard.ts), named by content hash. */
export const ASSET_ENTRIES = [
  { name: 'main.js', source: 'dashboard/client/main.ts' },
  { name: 'main.css', source: 'dashboard/styles/main.css' },
] as const;

export type AssetName = (typeof ASSET_ENTRIES)[number]['name'];

const CONTENT_TYPES: Record<string, string> = {
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.map': 'application/json',
};

/** The project root: the nearest folder above this module holding package.json (from source or from dist). */
function projectRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json'))) {
    const up = dirname(dir);
    if (up === dir) throw new Error('dashboard: no package.json above dashboard/assets');
    dir = up;
  }
  return dir;
}

export function assetsDir(): string {
  return join(projectRoot(), 'dist', 'dashboard', 'assets');
}

let manifest: Record<string, string> | undefined;

/** The URL of a built asset; throws (naming the command) when the build has not run. */
export function assetUrl(name: AssetName): string {
  if (!manifest) {
    const path = join(assetsDir(), 'manifest.json');
    try {
      manifest = JSON.parse(readFileSync(path, 'utf8')) as Record<string, string>;
    } catch {
      throw new Error(`dashboard assets are not built (${path} is missing): run npm run build`);
    }
  }
  const file = manifest[name];
  if (!file) throw new Error(`dashboard asset ${name} is not in the manifest: run npm run build`);
  return `/dashboard/assets/${file}`;
}

/** Serves the hashed files: a name changes with its content, so each is cached for a year. */
export function assetRoutes() {
  return new Hono<DashEnv>().get('/assets/:file', (c) => {
    const file = c.req.param('file');
    const ext = /\.[a-z]+$/.exec(file)?.[0] ?? '';
    if (!/^[A-Za-z0-9_-]+\.[a-z]+$/.test(file) || !CONTENT_TYPES[ext] || file === 'manifest.json') return c.text('Not found', 404);
    let body: Buffer;
    try {
      body = readFileSync(join(assetsDir(), file));
    } catch {
      return c.text('Not found', 404);
    }
    return c.body(new Uint8Array(body), 200, { 'Content-Type': CONTENT_TYPES[ext]!, 'Cache-Control': 'public, max-age=31536000, immutable' });
  });
}
