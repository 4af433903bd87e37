import { Hono } from 'hono';
import type { Deps } from '../../server/deps.js';
import type { DashEnv } from '../env.js';
import { render } from '../render.js';

// Placeholder until this section is built (issue 14); replaced by its page module.
export function capturedPages(deps: Deps) {
  return new Hono<DashEnv>().get('/captured', (c) => render(deps, c, { title: 'Captured mail', current: '/dashboard/captured' }, <p class="muted">This section is being built.</p>));
}
