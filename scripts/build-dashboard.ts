import { mkdirSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { ASSET_ENTRIES, assetsDir } from '../dashboard/assets.js';

/**
 * Bundles the dashboard's browser code and styles with esbuild into content-hashed files under dist/dashboard/assets,
 * with manifest.json naming each entry's file (read by dashboard/assets.ts). Part of `npm run build`; offline (esbuild
 * comes from npm, nothing is fetched). Silent unless esbuild warns: `npm run cli` builds first and prints only JSON.
 *
 * A server may be running from this dist/ (the CLI builds before each command): the files are built aside and each is
 * renamed into place, never deleted or half written under it, and files of earlier builds stay, for pages a running
 * server still names.
 */
const root = fileURLToPath(new URL('../..', import.meta.url));
const out = assetsDir();
const staging = `${out}.staging-${process.pid}`;
rmSync(staging, { recursive: true, force: true });
mkdirSync(staging, { recursive: true });
mkdirSync(out, { recursive: true });
const result = await build({
  absWorkingDir: root,
  entryPoints: ASSET_ENTRIES.map((e) => e.source),
  outdir: staging,
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
writeFileSync(join(staging, 'manifest.json'), `${JSON.stringify(manifest, null, 2)}\n`);
// The bundles first, the manifest naming them last: a reader never meets a name whose file is not there yet.
const files = readdirSync(staging).sort((a, b) => Number(a === 'manifest.json') - Number(b === 'manifest.json'));
for (const file of files) renameSync(join(staging, file), join(out, file));
rmSync(staging, { recursive: true, force: true });
