import { runtimeProblem } from './runtime.js';

/** Imported first by each entry point, so an old Node stops here, before any module loads a native addon. */
const problem = runtimeProblem(process.version);
if (problem) {
  process.stderr.write(`mailstead: ${problem}\n`);
  process.exit(1);
}
