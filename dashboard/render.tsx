import type { Context } from 'hono';
import type { Child } from 'hono/jsx';
import type { Deps } from '../server/deps.js';
import type { DashEnv } from './env.js';
import { type Flash, setFlash, takeFlash } from './session.js';
import { type NavHref, Page } from './ui.js';

/**
 * How a page answers: `render` wraps the body in the signed-in frame (with the session's flash, shown once);
 * `redirectWithFlash` ends a form's POST (POST, redirect, GET: a reload never resubmits).
 */
export function render(deps: Deps, c: Context<DashEnv>, page: { title: string; current: NavHref; status?: number }, body: Child) {
  const session = c.var.session;
  const flash = takeFlash(deps, session);
  return c.html(
    <Page title={page.title} current={page.current} csrf={session.csrfToken} flash={flash}>
      {body}
    </Page>,
    (page.status ?? 200) as 200,
  );
}

export function redirectWithFlash(deps: Deps, c: Context<DashEnv>, to: string, flash: Flash) {
  setFlash(deps, c.var.session, flash);
  return c.redirect(to, 303);
}

/** A form field as a string ('' when absent). */
export function field(c: Context<DashEnv>, name: string): string {
  return c.var.form[name] ?? '';
}
