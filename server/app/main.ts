// The server's entry point. Static imports are all loaded before any of them runs, so the runtime check is the only
// one: on an older Node it stops before anything else is loaded; then the load hooks, then the service.
import './runtime-guard.js';

await import('./load-hooks.js');
await import('./serve.js');
