import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ESM_PACKAGES_RESOLVED_DIRECTLY, resolveDirectly } from '../server/app/direct-resolve.js';

/**
 * The entry points resolve the relative imports inside a few packages as plain URL arithmetic (Node 24 re-parses a
 * package's whole exports map for each of its files). That is only right while each package is ES modules throughout,
 * with fully specified relative paths and no nested package.json: checked here on the installed packages.
 */

const ROOT = fileURLToPath(new URL('..', import.meta.url));

function jsFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? (e.name === 'node_modules' ? [] : jsFiles(join(dir, e.name))) : e.name.endsWith('.js') ? [join(dir, e.name)] : [],
  );
}

describe.each(ESM_PACKAGES_RESOLVED_DIRECTLY)('%s', (name) => {
  const dir = join(ROOT, 'node_modules', name);

  it('is ES modules throughout: "type": "module" and no nested package.json', () => {
    expect(JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')).type).toBe('module');
    const nested = (d: string): string[] =>
      readdirSync(d, { withFileTypes: true }).flatMap((e) =>
        e.isDirectory() ? [...(existsSync(join(d, e.name, 'package.json')) ? [join(d, e.name)] : []), ...nested(join(d, e.name))] : [],
      );
    expect(nested(dir)).toEqual([]);
  });

  it('every relative import of its .js files resolves directly to a file that exists', () => {
    const files = jsFiles(dir);
    expect(files.length).toBeGreaterThan(100);
    let checked = 0;
    const missing: string[] = [];
    for (const file of files) {
      const parent = pathToFileURL(file).href;
      for (const m of readFileSync(file, 'utf8').matchAll(/(?:from|import)\s*["'](\.{1,2}\/[^"']+)["']/g)) {
        const url = resolveDirectly(m[1]!, parent);
        expect(url).not.toBeNull();
        if (!existsSync(fileURLToPath(url!))) missing.push(`${file}: ${m[1]}`);
        checked++;
      }
    }
    expect(checked).toBeGreaterThan(500);
    expect(missing).toEqual([]);
  });
});

describe('resolveDirectly', () => {
  const parent = pathToFileURL(join(ROOT, 'node_modules/drizzle-orm/sql/sql.js')).href;

  it('leaves bare specifiers, other packages and the project itself to Node', () => {
    expect(resolveDirectly('drizzle-orm', parent)).toBeNull();
    expect(resolveDirectly('node:fs', parent)).toBeNull();
    expect(resolveDirectly('./x.js', pathToFileURL(join(ROOT, 'node_modules/hono/dist/index.js')).href)).toBeNull();
    expect(resolveDirectly('./x.js', pathToFileURL(join(ROOT, 'dist/server/app/main.js')).href)).toBeNull();
    expect(resolveDirectly('./x.js', undefined)).toBeNull();
  });

  it('resolves a package file relative import as a URL', () => {
    expect(resolveDirectly('../entity.js', parent)).toBe(pathToFileURL(join(ROOT, 'node_modules/drizzle-orm/entity.js')).href);
  });
});
