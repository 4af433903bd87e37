import { Hono } from 'hono';
import { CUSTOMER_DB_STATES, type CustomerDbState } from '../../db/schema/index.js';
import { testDatabase } from '../../server/customer-db/operations.js';
import type { Deps } from '../../server/core/deps.js';
import { isUuid } from '../../server/shared/ids.js';
import type { DashEnv } from '../env.js';
import { formatCount, plural } from '../format.js';
import { operatorContext, requireAccount } from '../on-behalf.js';
import { countDatabases, listDatabases } from '../queries/databases.js';
import { field, formAction, render } from '../render.js';
import { Pager, withQuery } from '../ui.js';
import { DatabaseTable, StateFilter } from '../views/database.js';

/**
 * The customer databases (docs/api/contract.md, Database; docs/api/decisions.md section 8), one row per account that has its own: the status
 * GET /database answers (state, writes waiting, last error, last success; never the URL or its password) and a Test
 * button calling the API's own POST /database/test function, its answer shown in the flash.
 */

const current = '/dashboard/database' as const;

const stateParam = (v: string | undefined): CustomerDbState | null =>
  (CUSTOMER_DB_STATES as readonly string[]).includes(v ?? '') ? (v as CustomerDbState) : null;
/** An account id as a keyset position; anything else starts from the first page. */
const afterParam = (v: string | undefined) => (v !== undefined && isUuid(v) ? v : null);

/** The list's address with its filter and page. */
const listPath = (state: CustomerDbState | null, after: string | null): string => withQuery(current, { state, after });

export function databasePages(deps: Pick<Deps, 'clock' | 'config' | 'db' | 'logger' | 'resolver' | 'secretKey'>) {
  return new Hono<DashEnv>()
    .get('/database', async (c) => {
      const state = stateParam(c.req.query('state'));
      const after = afterParam(c.req.query('after'));
      const { entries, more } = await listDatabases(deps.db, { state, after });
      const counts = await countDatabases(deps.db);
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
              <div class="value">{formatCount(counts.total)}</div>
            </div>
            <div class="card">
              <div class="label">Unreachable</div>
              <div class="value">{formatCount(counts.unreachable)}</div>
            </div>
          </div>
          <p class="muted">
            Each account may connect its own Postgres (<code>POST /api/v1/database</code>); its sub-accounts write to it too. Writes wait in this server while
            their database cannot be reached, tried again with growing gaps for seven days.
          </p>
          <StateFilter state={state} />
          <DatabaseTable
            entries={entries}
            csrf={c.var.session.csrfToken}
            back={back}
            empty={state ? `No database is ${state}.` : 'No account has connected a database.'}
          />
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
      const account = await requireAccount(deps.db, c.req.param('accountId'));
      const back = listPath(stateParam(field(c, 'state')), afterParam(field(c, 'after')));
      const refused = (message: string) => `Testing the database of ${account.name} failed: ${message}`;
      return formAction(
        deps,
        c,
        back,
        async () => {
          const s = await testDatabase({ deps, ctx: operatorContext(account) });
          return {
            kind: 'ok',
            message: `The database of ${account.name} answered: ${s.state}, schema version ${s.schemaVersion}, ${plural(s.pending, 'write')} waiting.`,
          };
        },
        refused,
      );
    });
}
