#!/usr/bin/env node
// The operator CLI's entry point: the runtime check first (the only static import), then the load hooks, then the commands.
import './runtime-guard.js';

await import('./load-hooks.js');
await import('./cli-commands.js');
