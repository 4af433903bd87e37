import { registerHooks } from 'node:module';
import { resolveDirectly } from './direct-resolve.js';

/** Registered by the entry points before the service's modules load (direct-resolve.ts says why). */
registerHooks({
  resolve(specifier, context, nextResolve) {
    const url = resolveDirectly(specifier, context.parentURL);
    return url ? { url, format: 'module', shortCircuit: true } : nextResolve(specifier, context);
  },
});
