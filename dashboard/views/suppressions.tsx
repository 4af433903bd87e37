import type { FC } from 'hono/jsx';
import { MAX_ADDRESS_INPUT } from '../../server/core/suppressions.js';
import type { AccountChoice } from '../queries/accounts.js';
import { MAX_SEARCH, REASONS, type SuppressionSummary } from '../queries/suppressions.js';
import { AccountSelect, Badge, CsrfField, Dash, DataTable, PostButton, Time } from '../ui.js';

/** The suppressions page's pieces: the add form, the search form, the list with its remove buttons. */

export const AddSuppressionForm: FC<{ accounts: AccountChoice[]; accountId: string | undefined; csrf: string; back: string }> = ({
  accounts,
  accountId,
  csrf,
  back,
}) => (
  <section aria-labelledby="add-suppression">
    <h2 id="add-suppression">Add an address</h2>
    {accounts.length === 0 ? (
      <p class="panel muted">There is no account yet.</p>
    ) : (
      <form method="post" action="/dashboard/suppressions" class="panel form-grid">
        <CsrfField token={csrf} />
        <input type="hidden" name="back" value={back} />
        <div class="field">
          <label for="add-account">Account</label>
          <AccountSelect id="add-account" choices={accounts} selected={accountId} blank={accountId === undefined ? 'Choose an account' : undefined} required />
        </div>
        <div class="field">
          <label for="add-address">Address</label>
          <input
            id="add-address"
            name="address"
            type="text"
            inputmode="email"
            autocomplete="off"
            required
            maxlength={MAX_ADDRESS_INPUT}
            aria-describedby="add-address-hint"
          />
          <span id="add-address-hint" class="hint">
            Listed with reason "manual", as POST /suppressions does; the account then cannot send to it.
          </span>
        </div>
        <div class="field">
          <button type="submit">Add to the list</button>
        </div>
      </form>
    )}
  </section>
);

export const SearchForm: FC<{ accounts: AccountChoice[]; accountId: string | undefined; search: string }> = ({ accounts, accountId, search }) => (
  <form method="get" action="/dashboard/suppressions" class="panel form-grid" aria-label="Search suppressions">
    <div class="field">
      <label for="search-address">Address</label>
      <input id="search-address" name="q" type="search" value={search} maxlength={MAX_SEARCH} aria-describedby="search-address-hint" />
      <span id="search-address-hint" class="hint">
        The whole address or its start, in any case.
      </span>
    </div>
    <div class="field">
      <label for="search-account">Account</label>
      <AccountSelect id="search-account" choices={accounts} selected={accountId} blank="All accounts" />
    </div>
    <div class="field">
      <button type="submit">Search</button>
    </div>
  </form>
);

export const SuppressionTable: FC<{ rows: SuppressionSummary[]; csrf: string; back: string }> = ({ rows, csrf, back }) => (
  <DataTable
    caption="Suppressed addresses, newest first"
    columns={['Address', 'Account', 'Reason', 'Source email', 'Added', 'Action']}
    items={rows}
    empty={<p class="panel muted">No suppressed address matches.</p>}
    row={(s) => (
      <tr>
        <td>
          <code>{s.view.address}</code>
        </td>
        <td>{s.accountName}</td>
        <td>
          <Badge tone={REASONS[s.view.reason].tone}>{REASONS[s.view.reason].label}</Badge>
          {s.view.detail && <div class="muted">{s.view.detail}</div>}
        </td>
        <td>{s.sourceEmailId ? <a href={`/dashboard/emails/${s.sourceEmailId}`}>{s.sourceEmailId}</a> : <Dash />}</td>
        <td>
          <Time at={s.view.createdAt} />
        </td>
        <td>
          <PostButton
            action="/dashboard/suppressions/remove"
            csrf={csrf}
            label="Remove"
            variant="danger"
            fields={{ account: s.accountId, address: s.view.address, back }}
            confirm={`Remove ${s.view.address} from ${s.accountName}'s suppression list? The account can then send to it again.`}
            accessibleLabel={`Remove ${s.view.address} from ${s.accountName}'s list`}
          />
        </td>
      </tr>
    )}
  />
);
