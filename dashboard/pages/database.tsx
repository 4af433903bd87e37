import { Hono } from 'hono';
import type { FC } from 'hono/jsx';
import { CUSTOMER_DB_STATES, type CustomerDbState } from '../../db/schema/index.js';
import { testDatabase } from '../../server/core/customer-db.js';
import type { Deps } from '../../server/deps.js';
import { ApiError } from '../../server/errors.js';
import type { DashEnv } from '../env.js';
import { operatorContext, requireAccount } from '../on-behalf.js';
import { type DatabaseEntry, countDatabases, listDatabases } from '../queries/databases.js';
import { field, redirectWithFlash, render } from '../render.js';
import { Badge, type BadgeTone, Pager, PostButton, Time, withQuery } from '../ui.js';

/**
 * The customer databases (api.md, Database; decisions.md section 8), one row per account that has its own: the status
 * GET /database answers (state, writes waiting, last error, last success; never the URL or its password) and a Test
 * button calling the API's own POST /database/test function, its answer shown in the flash.
 */

const current = '/dashboard/database' as const;

const STATE_TONES: Record<CustomerDbState, BadgeTone> = { connected: 'ok', unreachable: 'bad' };

const stateParam = (v: string | undefined): CustomerDbState | null => (CUSTOMER_DB_STATES as readonly string[]).includes(v ?? '') ? (v as CustomerDbState) : null;
/** An account id as a keyset position (ids are UUIDs); anything else starts from the first page. */
const afterParam = (v: string | undefined) => (v !== undefined && /^[0-9a-f-]{36}$/i.test(v) ? v : null);

/** The list's address with its filter and page. */
const listPath = (state: CustomerDbState | null, after: string | null): string => withQuery(current, { state, after });

const plural = (n: number, one: string) => `${n.toLocaleString('en')} ${one}${n === 1 ? '' : 's'}`;

const StateFilter: FC<{ state: CustomerDbState | null }> = ({ state }) => (
  <form method="get" action="/dashboard/database" class="panel row filter-row">
    <div class="field">
      <label for="database-state">State</label>
      <select id="database-state" name="state" data-autosubmit>
        <option value="">All</option>
        {CUSTOMER_DB_STATES.map((s) => (
          <option value={s} selected={s === state}>
            {s}
          </option>
        ))}
      </select>
    </div>
    <button type="submit" class="secondary">
      Show
    </button>
  </form>
);

const DatabaseTable: FC<{ entries: DatabaseEntry[]; csrf: string; back: Record<string, string> }> = ({ entries, csrf, back }) => (
  <div class="table-wrap">
    <table>
      <caption class="visually-hidden">Customer databases by account</caption>
      <thead>
        <tr>
          <th scope="col">Account</th>
          <th scope="col">Database</th>
          <th scope="col">State</th>
          <th scope="col" class="num">Pending writes</th>
          <th scope="col">Last error</th>
          <th scope="col">Last success</th>
          <th scope="col">Check</th>
        </tr>
      </thead>
      <tbody>
        {entries.map(({ accountId, accountName, status: s }) => (
          <tr>
            <td>
              {accountName}
              <div>
                <code class="muted">{accountId}</code>
              </div>
            </td>
            <td>
              <code>
                {s.host}:{s.port}/{s.database}
              </code>
              <div class="muted">
                as {s.user}, TLS {s.sslMode}, schema v{s.schemaVersion}
              </div>
            </td>
            <td>{s.state && <Badge tone={STATE_TONES[s.state as CustomerDbState] ?? 'warn'}>{s.state}</Badge>}</td>
            <td class="num">{s.pending > 0 ? <Badge tone="warn">{s.pending.toLocaleString('en')}</Badge> : '0'}</td>
            <td class="error-text">{s.lastError ?? <span class="muted">none</span>}</td>
            <td>
              <Time ms={s.lastOkAt === null ? null : Date.parse(s.lastOkAt)} />
            </td>
            <td>
              <PostButton action={`/dashboard/database/${accountId}/test`} csrf={csrf} label="Test" fields={back} accessibleLabel={`Test the database of ${accountName}`} />
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  </div>
);

export function databasePages(deps: Deps) {
  return new Hono<DashEnv>()
    .get('/database', (c) => {
      const state = stateParam(c.req.query('state'));
      const after = afterParam(c.req.query('after'));
      const { entries, more } = listDatabases(deps.db, { state, after });
      const counts = countDatabases(deps.db);
      const back: Record<string, string> = {};
      if (state) back.state = state;
      if (after) back.after = after;
      return render(
        deps,
        c,
        { title: 'Database', current },
        <>
          <div class="cards">
            <div class="card">
              <div class="label">Databases</div>
              <div class="value">{counts.total.toLocaleString('en')}</div>
            </div>
            <div class="card">
              <div class="label">Unreachable</div>
              <div class="value">{counts.unreachable.toLocaleString('en')}</div>
            </div>
          </div>
          <p class="muted">
            Each account may connect its own Postgres (<code>POST /api/v1/database</code>); its sub-accounts write to it too. Writes wait in this server while their
            database cannot be reached, tried again with growing gaps for seven days.
          </p>
          <StateFilter state={state} />
          {entries.length === 0 ? (
            <p class="panel">{state ? `No database is ${state}.` : 'No account has connected a database.'}</p>
          ) : (
            <DatabaseTable entries={entries} csrf={c.var.session.csrfToken} back={back} />
          )}
          <Pager
            label="Database pages"
            newer={after !== null ? listPath(state, null) : null}
            older={more ? listPath(state, entries[entries.length - 1]!.accountId) : null}
            newerLabel="First page"
            olderLabel="Next page"
          />
        </>,
      );
    })
    .post('/database/:accountId/test', async (c) => {
      const account = requireAccount(deps.db, c.req.param('accountId'));
      const back = listPath(stateParam(field(c, 'state')), afterParam(field(c, 'after')));
      try {
        const s = await testDatabase({ deps, ctx: operatorContext(account) });
        return redirectWithFlash(deps, c, back, {
          kind: 'ok',
          message: `The database of ${account.name} answered: ${s.state}, schema version ${s.schemaVersion}, ${plural(s.pending, 'write')} waiting.`,
        });
      } catch (err) {
        if (!(err instanceof ApiError)) throw err;
        return redirectWithFlash(deps, c, back, { kind: 'error', message: `Testing the database of ${account.name} failed: ${err.message}` });
      }
    });
}
