import type { FC } from 'hono/jsx';
import { CUSTOMER_DB_STATES, type CustomerDbState } from '../../db/schema/index.js';
import { formatCount } from '../format.js';
import type { DatabaseEntry } from '../queries/databases.js';
import { Badge, type BadgeTone, DataTable, PostButton, Time } from '../ui.js';

/** The database page's pieces: the state filter and the table of databases with their Test buttons. */

const STATE_TONES: Record<CustomerDbState, BadgeTone> = { connected: 'ok', unreachable: 'bad' };

/** A customer database's state as the writer keeps it. */
export const DatabaseStateBadge: FC<{ state: string }> = ({ state }) => <Badge tone={STATE_TONES[state as CustomerDbState] ?? 'warn'}>{state}</Badge>;

export const StateFilter: FC<{ state: CustomerDbState | null }> = ({ state }) => (
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

export const DatabaseTable: FC<{ entries: DatabaseEntry[]; csrf: string; back: Record<string, string>; empty: string }> = ({ entries, csrf, back, empty }) => (
  <DataTable
    caption="Customer databases by account"
    columns={['Account', 'Database', 'State', { label: 'Pending writes', class: 'num' }, 'Last error', 'Last success', 'Check']}
    items={entries}
    empty={<p class="panel">{empty}</p>}
    row={({ accountId, accountName, status: s }) => (
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
        <td>{s.state && <DatabaseStateBadge state={s.state} />}</td>
        <td class="num">{s.pending > 0 ? <Badge tone="warn">{formatCount(s.pending)}</Badge> : '0'}</td>
        <td class="error-text">{s.lastError ?? <span class="muted">none</span>}</td>
        <td>
          <Time at={s.lastOkAt} />
        </td>
        <td>
          <PostButton
            action={`/dashboard/database/${accountId}/test`}
            csrf={csrf}
            label="Test"
            fields={back}
            accessibleLabel={`Test the database of ${accountName}`}
          />
        </td>
      </tr>
    )}
  />
);
