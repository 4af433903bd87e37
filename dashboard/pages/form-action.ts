import type { Context } from 'hono';
import type { Deps } from '../../server/deps.js';
import { ApiError } from '../../server/errors.js';
import type { DashEnv } from '../env.js';
import { redirectWithFlash } from '../render.js';
import type { Flash } from '../session.js';

/** What a change reports: its flash, and where to go next (the page it was made from, unless `to` says). */
export type Outcome = Flash & { to?: string };

/**
 * Ends a form's POST (POST, redirect, GET). A refusal by a domain function (a 4xx ApiError: bad input, a limit, a
 * conflict) goes back to `back` as an error flash with its message, having changed nothing; anything else is a 500.
 */
export async function formAction(deps: Deps, c: Context<DashEnv>, back: string, run: () => Outcome | Promise<Outcome>): Promise<Response> {
  let outcome: Outcome;
  try {
    outcome = await run();
  } catch (err) {
    if (!(err instanceof ApiError) || err.status >= 500) throw err;
    outcome = { kind: 'error', message: err.message };
  }
  const { to, ...flash } = outcome;
  return redirectWithFlash(deps, c, to ?? back, flash);
}

/** A refusal of the dashboard's own input checks, shown like a domain function's. */
export function refuse(message: string): never {
  throw new ApiError('invalid_request', message);
}
