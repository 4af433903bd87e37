import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join, normalize, relative, sep } from 'node:path';
import ts from 'typescript';

/**
 * The layers of docs/design/layers.md as data: each folder's rank, lowest first. A module may import a module of its
 * own layer (the same folder) or of a layer with a lower rank, never one of the same rank in another folder, never a
 * higher one. `server/shared` and `db` are the two floors: each imports only itself.
 */
export const LAYERS: readonly { folder: string; rank: number; imports: 'own' | 'lower' }[] = [
  { folder: 'server/shared', rank: 0, imports: 'own' },
  { folder: 'db', rank: 0, imports: 'own' },
  { folder: 'server/core', rank: 1, imports: 'lower' },
  { folder: 'server/queues', rank: 2, imports: 'lower' },
  { folder: 'mta', rank: 3, imports: 'lower' },
  { folder: 'server/webhooks', rank: 3, imports: 'lower' },
  { folder: 'server/customer-db', rank: 3, imports: 'lower' },
  { folder: 'server/api', rank: 4, imports: 'lower' },
  { folder: 'dashboard', rank: 5, imports: 'lower' },
  { folder: 'server/app', rank: 6, imports: 'lower' },
];

export interface Violation {
  file: string;
  imports: string;
  why: string;
}

/** The layer a repository path belongs to (the longest folder that holds it), or null for one outside the layers. */
export function layerOf(path: string): (typeof LAYERS)[number] | null {
  let best: (typeof LAYERS)[number] | null = null;
  for (const layer of LAYERS) {
    if ((path === layer.folder || path.startsWith(`${layer.folder}/`)) && (!best || layer.folder.length > best.folder.length)) best = layer;
  }
  return best;
}

/** Why `from` may not import `to` (both repository paths), or null when it may. */
export function ruleBroken(from: string, to: string): string | null {
  const a = layerOf(from);
  const b = layerOf(to);
  if (!a) return null;
  if (!b) return `${a.folder} imports ${to}, which is in no layer`;
  if (a === b) return null;
  if (a.imports === 'own') return `${a.folder} imports nothing of the other layers (what it needs is passed in), but imports ${b.folder}`;
  if (b.rank === a.rank) return `${a.folder} and ${b.folder} are side by side: neither imports the other`;
  if (b.rank > a.rank) return `${a.folder} (rank ${a.rank}) imports ${b.folder} (rank ${b.rank}), a higher layer`;
  return null;
}

/** The relative module specifiers of a TypeScript source: static imports and re-exports, type-only ones included, and `import()`. */
export function specifiersOf(source: string): string[] {
  const info = ts.preProcessFile(source, true, true);
  return info.importedFiles.map((f) => f.fileName).filter((s) => s.startsWith('.'));
}

/** Every import against the direction in the given files (repository path and source text). */
export function violationsIn(files: Iterable<{ path: string; source: string }>): Violation[] {
  const out: Violation[] = [];
  for (const { path, source } of files) {
    for (const spec of specifiersOf(source)) {
      const target = normalize(join(dirname(path), spec))
        .split(sep)
        .join('/')
        .replace(/\.js$/, '.ts');
      const why = ruleBroken(path, target);
      if (why) out.push({ file: path, imports: spec, why });
    }
  }
  return out;
}

/** The product's sources under the layered folders, as the check reads them. */
export function productSources(root: string): { path: string; source: string }[] {
  const files: { path: string; source: string }[] = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
      const path = `${dir}/${entry.name}`;
      if (entry.isDirectory()) {
        if (entry.name !== 'node_modules' && entry.name !== 'migrations' && path !== 'dashboard/client') walk(path);
      } else if (/\.tsx?$/.test(entry.name)) {
        files.push({ path: relative(root, join(root, path)).split(sep).join('/'), source: readFileSync(join(root, path), 'utf8') });
      }
    }
  };
  for (const top of ['server', 'mta', 'db', 'dashboard']) walk(top);
  return files;
}
