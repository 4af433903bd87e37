import { Hono } from 'hono';
import type { Deps } from '../../server/core/deps.js';
import type { DashEnv } from '../env.js';
import { requireAccount } from '../on-behalf.js';
import { accountChoices } from '../queries/accounts.js';
import { emailTrail } from '../queries/email-trail.js';
import { readPageLink } from '../queries/id-pages.js';
import { listSendLog, parseSendLogQuery } from '../queries/send-log.js';
import { render } from '../render.js';
import { Pager, pageHrefs, withQuery } from '../ui.js';
import { EmailTrailView } from '../views/email-trail.js';
import { FILTER_FIELDS, FilterForm, type FilterValues, SendLogTable } from '../views/emails.js';

const current = '/dashboard/emails' as const;

/** GET /dashboard/emails: the send log of every account, filtered and paged; GET /dashboard/emails/:id: one email's trail. */
export function emailPages(deps: Pick<Deps, 'clock' | 'config' | 'db' | 'secretKey'>) {
  return new Hono<DashEnv>()
    .get('/emails', async (c) => {
      const query = c.req.query();
      const { filter, errors } = parseSendLogQuery(query);
      // An account that does not exist (or was deleted) is the 404 page, as on every other list.
      if (filter.account !== null) await requireAccount(deps.db, filter.account);
      const link = readPageLink((n) => c.req.query(n));
      const values = Object.fromEntries(FILTER_FIELDS.map((f) => [f, query[f] ?? ''])) as FilterValues;
      const page = errors.length === 0 ? await listSendLog(deps.db, filter, link) : null;
      return render(
        deps,
        c,
        { title: 'Send log', current, status: errors.length > 0 ? 400 : 200 },
        <>
          <FilterForm values={values} accounts={await accountChoices(deps.db, filter.account)} />
          {errors.length > 0 && (
            <div class="flash error" role="alert">
              <div>The send log cannot be filtered like that:</div>
              <ul>
                {errors.map((e) => (
                  <li>{e}</li>
                ))}
              </ul>
            </div>
          )}
          {page && <SendLogTable rows={page.items} filtered={FILTER_FIELDS.some((f) => values[f].trim() !== '')} />}
          {page && <Pager label="Send log pages" {...pageHrefs(page, (params) => withQuery(current, { ...values, ...params }))} />}
        </>,
      );
    })
    .get('/emails/:id', async (c) => {
      const trail = await emailTrail(deps, c.req.param('id'));
      const subject = trail.email.subject.length > 60 ? `${trail.email.subject.slice(0, 60)}…` : trail.email.subject;
      return render(deps, c, { title: `Email: ${subject}`, current }, <EmailTrailView trail={trail} mode={deps.config.deliveryMode} />);
    });
}
