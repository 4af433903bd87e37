import { Hono } from 'hono';
import type { Deps } from '../../server/core/deps.js';
import { ApiError } from '../../server/shared/errors.js';
import type { DashEnv } from '../env.js';
import { capturedRecipientsOf, countCaptured, listCaptured } from '../queries/captured.js';
import { dkimVerdictOf, openCaptured, partsOf } from '../queries/captured-message.js';
import { render } from '../render.js';
import { CAPTURED_HTML_HEADERS } from '../security.js';
import { Pager, withQuery } from '../ui.js';
import { CapturedTable, DkimSection, MessageFacts, ModeNotice, PartsSections, SearchForm, capturedPath } from '../views/captured.js';

/**
 * Captured mail (DELIVERY_MODE=capture), like Mailpit: the list across every account, newest first, and one
 * recipient's message (GET /captured/:emailId?recipient=, the address the send log links with): its HTML in a
 * sandboxed frame served under its own policy, the text part, the headers, the raw source and its DKIM verdict.
 */

const current = '/dashboard/captured' as const;

/** A keyset position from the query string, or null (an unusable one starts from the newest). */
const seqParam = (v: string | undefined) => (v !== undefined && /^[1-9][0-9]{0,14}$/.test(v) ? Number(v) : null);

export function capturedPages(deps: Pick<Deps, 'clock' | 'config' | 'db' | 'logger' | 'resolver' | 'secretKey'>) {
  const capturing = () => deps.config.deliveryMode === 'capture';

  return new Hono<DashEnv>()
    .get('/captured', async (c) => {
      const search = (c.req.query('q') ?? '').trim().slice(0, 320);
      const before = seqParam(c.req.query('before'));
      const { entries, more } = await listCaptured(deps.db, { search, before });
      const kept = await countCaptured(deps.db);
      // Keyset by the store's seq: "Newest" back to the first page, "Older" on from the last row shown.
      const href = (from: number | null) => withQuery(current, { q: search, before: from === null ? null : String(from) });
      return render(
        deps,
        c,
        { title: 'Captured mail', current },
        <>
          <ModeNotice capturing={capturing()} kept={kept} />
          <SearchForm search={search} />
          <CapturedTable
            entries={entries}
            linked={capturing()}
            empty={
              search !== '' ? `No captured message matches “${search}”.` : before !== null ? 'No older captured messages.' : 'No mail has been captured yet.'
            }
          />
          <Pager
            label="Captured mail pages"
            newer={before !== null ? href(null) : null}
            older={more ? href(entries[entries.length - 1]!.seq) : null}
            newerLabel="Newest"
          />
        </>,
      );
    })
    .get('/captured/:emailId', async (c) => {
      const emailId = c.req.param('emailId');
      const recipient = c.req.query('recipient');
      if (recipient === undefined) {
        // A link to the email alone opens its first captured recipient.
        const first = (await capturedRecipientsOf(deps.db, emailId))[0];
        if (first === undefined) throw new ApiError('email_not_found', 'No captured message for that email.');
        return c.redirect(capturedPath(emailId, first), 302);
      }
      const { entry, raw } = await openCaptured(deps, emailId, recipient);
      const [parts, verdict] = await Promise.all([partsOf(raw), dkimVerdictOf(deps, entry.accountId, raw)]);
      const others = (await capturedRecipientsOf(deps.db, emailId)).filter((r) => r !== entry.recipient);
      return render(
        deps,
        c,
        { title: entry.subject || '(no subject)', current },
        <>
          <p>
            <a href="/dashboard/captured">All captured mail</a>
          </p>
          <MessageFacts entry={entry} others={others} />
          <DkimSection verdict={verdict} />
          <PartsSections entry={entry} parts={parts} raw={raw.toString('utf8')} />
        </>,
      );
    })
    .get('/captured/:emailId/html', async (c) => {
      const { raw } = await openCaptured(deps, c.req.param('emailId'), c.req.query('recipient'));
      const { html } = await partsOf(raw);
      if (html === null) throw new ApiError('not_found', 'This message has no HTML part.');
      // Its own headers, set before the dashboard's (which fill in only what is missing): framed by our pages only,
      // never DENY; the policy's `sandbox` keeps scripts off even if the page is opened outside its frame.
      return c.body(html, 200, { ...CAPTURED_HTML_HEADERS, 'Content-Type': 'text/html; charset=utf-8', 'X-Frame-Options': 'SAMEORIGIN' });
    })
    .get('/captured/:emailId/raw', async (c) => {
      const { entry, raw } = await openCaptured(deps, c.req.param('emailId'), c.req.query('recipient'));
      const filename = `${entry.emailId}-${entry.recipient.replace(/[^A-Za-z0-9._@-]/g, '_')}.eml`;
      return c.body(new Uint8Array(raw), 200, { 'Content-Type': 'message/rfc822', 'Content-Disposition': `attachment; filename="${filename}"` });
    });
}
