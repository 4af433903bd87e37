import { describeConfig } from '../server/shared/config.js';

/** Prints the configuration table of docs/operating/configuration.md, generated from the config schema so the two cannot drift. */
export function configTable(): string {
  const rows = describeConfig().map((r) => `| \`${r.name}\` | ${r.default} | ${r.meaning.replace(/\|/g, '\\|')} |`);
  return ['| variable | default | meaning |', '|---|---|---|', ...rows].join('\n');
}

if (import.meta.url === `file://${process.argv[1]}`) process.stdout.write(`${configTable()}\n`);
