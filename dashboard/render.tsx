import type { Context } from 'hono';
import type { Child } from 'hono/jsx';
import type { Deps } from '../server/core/deps.js';
import { ApiError } from '../server/shared/errors.js';
import type { DashEnv } from './env.js';
import { type Flash, setFlash, takeFlash } from './session.js';
import { type NavHref, Page } from './ui.js';

/**
 * How a page answers: `render` wraps the body in the signed-in frame (with the session's flash, shown once);
 * `redirectWithFlash` ends a form's POST (POST, redirect, GET: a reload never resubmits), and `formAction` runs the
 * change in between.
 */
export async function render(
  deps: Pick<Deps, 'clock' | 'db'> & Partial<Pick<Deps, 'secretKey'>>,
  c: Context<DashEnv>,
  page: { title: string; current: NavHref; status?: number },
  body: Child,
) {
  const session = c.var.session;
  const flash = await takeFlash(deps, session);
  return c.html(
    <Page title={page.title} current={page.current} csrf={session.csrfToken} flash={flash}>
      {body}
    </Page>,
    (page.status ?? 200) as 200,
  );
}

export async function redirectWithFlash(deps: Pick<Deps, 'clock' | 'db'> & Partial<Pick<Deps, 'secretKey'>>, c: Context<DashEnv>, to: string, flash: Flash) {
  await setFlash(deps, c.var.session, flash);
  return c.redirect(to, 303);
}

/** What a change reports: its flash, and where to go next (the page it was made from, unless `to` says). */
export type Outcome = Flash & { to?: string };

/**
 * Ends a form's POST (POST, redirect, GET). A refusal by a domain function (an ApiError: bad input, a limit, a
 * conflict, an unknown row, a server that cannot keep secrets) goes back to `back` as an error flash with its message
 * (in the page's words, when `refused` gives them), having changed nothing; anything else (an internal_error, any
 * other exception) is a bug, answered with the 500 page.
 */
export async function formAction(
  deps: Pick<Deps, 'clock' | 'db'> & Partial<Pick<Deps, 'secretKey'>>,
  c: Context<DashEnv>,
  back: string,
  run: () => Outcome | Promise<Outcome>,
  refused: (message: string) => string = (message) => message,
): Promise<Response> {
  let outcome: Outcome;
  try {
    outcome = await run();
  } catch (err) {
    if (!(err instanceof ApiError) || err.code === 'internal_error') throw err;
    outcome = { kind: 'error', message: refused(err.message) };
  }
  const { to, ...flash } = outcome;
  return await redirectWithFlash(deps, c, to ?? back, flash);
}

/** A refusal of the dashboard's own input checks, shown like a domain function's. */
export function refuse(message: string): never {
  throw new ApiError('invalid_request', message);
}

/** A form field as a string ('' when absent). */
export function field(c: Context<DashEnv>, name: string): string {
  return c.var.form[name] ?? '';
}
