import { Hono } from 'hono';
import { readOperatorMessage } from '../../server/core/operator-mail.js';
import type { Deps } from '../../server/core/deps.js';
import { ApiError } from '../../server/shared/errors.js';
import { isUuid } from '../../server/shared/ids.js';
import type { DashEnv } from '../env.js';
import { type MessageParts, partsOf } from '../queries/captured-message.js';
import { countOperatorMessages, listOperatorMessages } from '../queries/postmaster.js';
import { render } from '../render.js';
import { Pager, withQuery } from '../ui.js';
import { PostmasterFacts, PostmasterNotice, PostmasterParts, PostmasterTable } from '../views/postmaster.js';

/**
 * The operator's own mail (docs/api/decisions.md section 13): what arrived at postmaster@ and abuse@ MAIL_HOSTNAME, newest
 * first, and one message: who sent it, its text, its headers and its source (downloadable). Its HTML is never
 * rendered and nothing in it is checked (mailauth never sees it): a stranger wrote it, and the page says so.
 */

const current = '/dashboard/postmaster' as const;

/** A keyset position from the query string, or null (an unusable one starts from the newest). */
const seqParam = (v: string | undefined) => (v !== undefined && /^[1-9][0-9]{0,14}$/.test(v) ? Number(v) : null);

export function postmasterPages(deps: Pick<Deps, 'clock' | 'config' | 'db' | 'logger' | 'secretKey'>) {
  /** The kept message of `id`; the 404 page when there is none (or no key to open it). */
  const open = async (id: string) => {
    const found = isUuid(id) ? await readOperatorMessage(deps.db, deps.secretKey, id.toLowerCase()) : null;
    if (!found) throw new ApiError('not_found', 'No message to postmaster or abuse by that id is kept.');
    return found;
  };

  return new Hono<DashEnv>()
    .get('/postmaster', async (c) => {
      const before = seqParam(c.req.query('before'));
      const { entries, more } = await listOperatorMessages(deps.db, before);
      return render(
        deps,
        c,
        { title: 'Postmaster mail', current },
        <>
          <PostmasterNotice hostname={deps.config.mailHostname} kept={await countOperatorMessages(deps.db)} />
          <PostmasterTable entries={entries} empty={before !== null ? 'No older messages.' : 'No mail has come to postmaster or abuse yet.'} />
          <Pager
            label="Postmaster mail pages"
            newer={before !== null ? current : null}
            older={more ? withQuery(current, { before: String(entries[entries.length - 1]!.seq) }) : null}
            newerLabel="Newest"
          />
        </>,
      );
    })
    .get('/postmaster/:id', async (c) => {
      const { entry, raw } = await open(c.req.param('id'));
      // At most OPERATOR_MESSAGE_BYTES (mailparser's own limits on parts and depth hold too): a message it cannot
      // parse is shown as its source.
      let parts: MessageParts | null = null;
      try {
        parts = await partsOf(raw);
      } catch (err) {
        deps.logger.info('dashboard.postmaster_unparsed', { id: entry.id, message: err instanceof Error ? err.message : String(err) });
      }
      return render(
        deps,
        c,
        { title: entry.subject || '(no subject)', current },
        <>
          <p>
            <a href={current}>All postmaster mail</a>
          </p>
          <p class="muted">Nothing in it is verified: anyone can write to these addresses and put any name in From.</p>
          <PostmasterFacts entry={entry} />
          <PostmasterParts entry={entry} parts={parts} raw={raw.toString('utf8')} />
        </>,
      );
    })
    .get('/postmaster/:id/raw', async (c) => {
      const { entry, raw } = await open(c.req.param('id'));
      return c.body(new Uint8Array(raw), 200, { 'Content-Type': 'message/rfc822', 'Content-Disposition': `attachment; filename="postmaster-${entry.id}.eml"` });
    });
}
