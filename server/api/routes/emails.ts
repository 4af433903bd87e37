import { Hono } from 'hono';
import { capturedMessageQuery, emailFilter, getCapturedMessage, getEmail, listEmails } from '../../core/emails.js';
import { validateIdempotencyKey } from '../../core/idempotency.js';
import { type ParsedSend, sendEmail } from '../../core/sending.js';
import { sendRequestSchema, toSendRequest } from '../../core/send-request.js';
import type { Deps } from '../../core/deps.js';
import { ApiError } from '../../shared/errors.js';
import { guard } from '../http/auth.js';
import { jsonBody } from '../http/body.js';
import type { AppEnv } from '../http/env.js';
import { LISTS, readPage, toPage } from '../http/paging.js';
import { parseInput } from '../http/validate.js';

export function emailRoutes(deps: Deps) {
  return new Hono<AppEnv>()
    .post('/emails', guard(deps, 'emails:send', 'accepted', null, true), async (c) => {
      const idempotencyKey = validateIdempotencyKey(c.req.header('idempotency-key'));
      const rawBody = c.var.rawBody;
      const { result, replayed } = await sendEmail({ deps, ctx: c.var.auth, rawBody, body: readSendRequest(rawBody), idempotencyKey });
      if (replayed) c.header('Idempotent-Replayed', 'true');
      return c.json(result);
    })
    .get('/emails', guard(deps, 'emails:read'), async (c) => {
      const ctx = c.var.auth;
      const filter = parseInput(emailFilter, c.req.query(), 'query');
      const page = await readPage(deps.db, LISTS.emails, ctx.account.id, filter);
      return c.json(await toPage(deps.db, LISTS.emails, ctx.account.id, page, listEmails({ deps, ctx, page, filter })));
    })
    .get('/emails/:id', guard(deps, 'emails:read'), async (c) => c.json(await getEmail({ deps, ctx: c.var.auth, id: c.req.param('id') })))
    .get('/emails/:id/message', guard(deps, 'emails:read'), async (c) => {
      const { recipient } = parseInput(capturedMessageQuery, c.req.query(), 'query');
      const message = await getCapturedMessage({ deps, ctx: c.var.auth, id: c.req.param('id'), recipient });
      return c.body(new Uint8Array(message), 200, { 'Content-Type': 'message/rfc822' });
    });
}

/**
 * The send request read from the body (JSON, then its fields), or the refusal of its reading as a value: the core
 * gives that verdict at check 5, after the checks the spec puts before it. Anything but a refusal is a fault of ours:
 * a 500 now. The dashboard's test email reads its body here too.
 */
export function readSendRequest(rawBody: Buffer): ParsedSend {
  try {
    return { ok: true, value: toSendRequest(parseInput(sendRequestSchema, jsonBody(rawBody))) };
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    return { ok: false, error: err };
  }
}
