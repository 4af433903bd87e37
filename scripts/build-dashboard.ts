import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { ASSET_ENTRIES, assetsDir } from '../dashboard/assets.js';

/**
 * Bundles the dashboard's browser code and styles with esbuild into content-hashed files under dist/dashboard/assets,
 * with manifest.json naming each entry's file (read by dashboard/assets.ts). Part of `npm run build`; offline (esbuild
 * comes from npm, nothing is fetched). Silent unless esbuild warns: `npm run cli` builds first and prints only JSON.
 */
const root = fileURLToPath(new URL('../..', import.meta.url));
const out = assetsDir();
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
const result = await build({
  absWorkingDir: root,
  entryPoints: ASSET_ENTRIES.map((e) => e.source),
  outdir: out,
  entryNames: '[name]-[hash]',
  bundle: true,
  minify: true,
  format: 'esm',
  target: ['chrome110', 'firefox110', 'safari16'],
  metafile: true,
  logLevel: 'warning',
});
const manifest: Record<string, string> = {};
for (const [file, meta] of Object.entries(result.metafile.outputs)) {
  if (!meta.entryPoint) continue;
  const entry = ASSET_ENTRIES.find((e) => e.source === meta.entryPoint);
  if (entry) manifest[entry.name] = basename(file);
}
writeFileSync(join(out, 'manifest.json'), `${JSON.stringify(manifest, null, 2)}\n`);
