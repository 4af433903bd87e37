/**
 * Module resolution on Node 24 re-parses a package's whole `exports` map for every file of it that it resolves
 * (`getPackageScopeConfig` spreads the lazily parsed map). drizzle-orm's is 178 KB and the service loads about 300
 * of its files, so a process spent 0.8 s of CPU before its first line (1.3 s for `cli.js --version`, against 0.5 s on
 * Node 20). The packages below are ES modules throughout (`"type": "module"`, no nested package.json) whose files
 * import each other by relative, fully specified paths: those are resolved here as URL arithmetic, which is all
 * Node's resolver would do for them after its lookups. Every other specifier goes to Node unchanged.
 */
export const ESM_PACKAGES_RESOLVED_DIRECTLY = ['drizzle-orm'] as const;

const markers = ESM_PACKAGES_RESOLVED_DIRECTLY.map((name) => `/node_modules/${name}/`);

/** The URL of a relative import made by a file of one of those packages, or null for Node to resolve. */
export function resolveDirectly(specifier: string, parentURL: string | undefined): string | null {
  if (!parentURL?.startsWith('file:') || !(specifier.startsWith('./') || specifier.startsWith('../'))) return null;
  if (!markers.some((m) => parentURL.includes(m))) return null;
  return new URL(specifier, parentURL).href;
}
