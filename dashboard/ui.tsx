import type { Child, FC, PropsWithChildren } from 'hono/jsx';
import { raw } from 'hono/html';
import { assetUrl } from './assets.js';
import type { AccountChoice } from './queries/accounts.js';
import type { IdPage } from './queries/id-pages.js';
import type { Flash } from './session.js';

/** The dashboard's sections, in the navigation's order. Each page module serves the paths under its href. */
export const NAV = [
  { href: '/dashboard', label: 'Overview' },
  { href: '/dashboard/accounts', label: 'Accounts' },
  { href: '/dashboard/domains', label: 'Domains' },
  { href: '/dashboard/emails', label: 'Send log' },
  { href: '/dashboard/captured', label: 'Captured mail' },
  { href: '/dashboard/templates', label: 'Templates' },
  { href: '/dashboard/webhooks', label: 'Webhooks' },
  { href: '/dashboard/suppressions', label: 'Suppressions' },
  { href: '/dashboard/database', label: 'Database' },
  { href: '/dashboard/postmaster', label: 'Postmaster mail' },
] as const;

export type NavHref = (typeof NAV)[number]['href'];

/** The bare HTML document: head with the hashed assets, and the body given. */
export const Document: FC<PropsWithChildren<{ title: string }>> = ({ title, children }) => (
  <>
    {raw('<!doctype html>')}
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <meta name="referrer" content="same-origin" />
        <title>{`${title} · Mailstead`}</title>
        <link rel="icon" href="data:," />
        <link rel="stylesheet" href={assetUrl('main.css')} />
        <script type="module" src={assetUrl('main.js')} defer></script>
      </head>
      <body>{children}</body>
    </html>
  </>
);

/** The hidden field every state-changing form carries. */
export const CsrfField: FC<{ token: string }> = ({ token }) => <input type="hidden" name="_csrf" value={token} />;

/**
 * A one-button form that POSTs to `action` (state changes are never links). `confirm` asks first (client script);
 * `fields` go along as hidden inputs.
 */
export const PostButton: FC<{
  action: string;
  csrf: string;
  label: string;
  variant?: 'primary' | 'secondary' | 'danger';
  confirm?: string;
  fields?: Record<string, string>;
  accessibleLabel?: string;
}> = ({ action, csrf, label, variant = 'secondary', confirm, fields = {}, accessibleLabel }) => (
  <form method="post" action={action} class="inline" data-confirm={confirm}>
    <CsrfField token={csrf} />
    {Object.entries(fields).map(([name, value]) => (
      <input type="hidden" name={name} value={value} />
    ))}
    <button type="submit" class={variant === 'primary' ? '' : variant} aria-label={accessibleLabel}>
      {label}
    </button>
  </form>
);

/**
 * An account picker (choices from accountChoices; a sub-account reads "Parent / Sub"). `blank` labels an empty first
 * option (all accounts, or none chosen yet); `autosubmit` submits the form on a change (client script).
 */
export const AccountSelect: FC<{
  id: string;
  name?: string;
  choices: AccountChoice[];
  selected: string | null | undefined;
  blank?: string | undefined;
  required?: boolean;
  autosubmit?: boolean;
}> = ({ id, name = 'account', choices, selected, blank, required, autosubmit }) => (
  <select id={id} name={name} required={required} data-autosubmit={autosubmit ? true : undefined}>
    {blank !== undefined && <option value="">{blank}</option>}
    {choices.map((a) => (
      <option value={a.id} selected={a.id === selected}>
        {a.parentName === null ? a.name : `${a.parentName} / ${a.name}`}
      </option>
    ))}
  </select>
);

/**
 * A panel whose form makes something for one account (a domain, a webhook endpoint): with no account yet it says to
 * create one first; else the form (CSRF field included) holds `children`, which start with an AccountField.
 */
export const AccountFormPanel: FC<
  PropsWithChildren<{ id: string; headingId: string; heading: string; thing: string; action: string; csrf: string; choices: AccountChoice[] }>
> = ({ id, headingId, heading, thing, action, csrf, choices, children }) => (
  <section class="panel" aria-labelledby={headingId} id={id}>
    <h2 id={headingId}>{heading}</h2>
    {choices.length === 0 ? (
      <p class="muted">
        Create an <a href="/dashboard/accounts">account</a> first: {thing} belongs to an account.
      </p>
    ) : (
      <form method="post" action={action}>
        <CsrfField token={csrf} />
        {children}
      </form>
    )}
  </section>
);

/** The account a form acts for: required, with a blank first choice until one is chosen. */
export const AccountField: FC<{ id: string; choices: AccountChoice[]; selected: string | null | undefined }> = ({ id, choices, selected }) => (
  <div class="field">
    <label for={id}>Account</label>
    <AccountSelect id={id} name="accountId" choices={choices} selected={selected} blank={selected == null ? 'Choose an account' : undefined} required />
  </div>
);

/** `path` with the non-empty params as its query string. */
export function withQuery(path: string, params: Record<string, string | null | undefined>): string {
  const query = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) if (value !== null && value !== undefined && value !== '') query.set(name, value);
  const text = query.toString();
  return text === '' ? path : `${path}?${text}`;
}

/**
 * Links to a list's newer and older pages (addresses, or null where there is none). A list that walks forward only
 * links back to its first page instead of the page before: its labels say so ("Newest", "First page").
 */
export const Pager: FC<{ label: string; newer: string | null; older: string | null; newerLabel?: string; olderLabel?: string }> = ({
  label,
  newer,
  older,
  newerLabel = 'Newer',
  olderLabel = 'Older',
}) =>
  newer === null && older === null ? null : (
    <nav class="pager" aria-label={label}>
      {newer !== null && (
        <a class="button secondary" href={newer}>
          {newerLabel}
        </a>
      )}
      {older !== null && (
        <a class="button secondary" href={older}>
          {olderLabel}
        </a>
      )}
    </nav>
  );

/**
 * The Pager's addresses for a keyset page: `href` builds an address from the page link's params (the list's filters
 * kept). `forwardOnly`: the newer link is the first page (readForwardLink reads no `before`).
 */
export function pageHrefs(
  page: IdPage<unknown>,
  href: (params: Record<string, string>) => string,
  { prefix = '', forwardOnly = false }: { prefix?: string; forwardOnly?: boolean } = {},
): { newer: string | null; older: string | null } {
  return {
    newer: page.newer === null ? null : href(forwardOnly ? {} : { [`${prefix}before`]: page.newer }),
    older: page.older === null ? null : href({ [`${prefix}after`]: page.older }),
  };
}

/**
 * A .table-wrap that a keyboard can scroll: on a phone a wide table scrolls inside it, and a table without links
 * would leave that scroll out of the keyboard's reach, so the region itself takes focus (and is named for it).
 */
export const TableRegion: FC<PropsWithChildren<{ label: string }>> = ({ label, children }) => (
  <div class="table-wrap" tabindex={0} role="region" aria-label={label}>
    {children}
  </div>
);

/** A column header: its text, or its text and a class (`num` for a column of numbers). */
export type Column = string | { label: string; class: string };

/**
 * A table of items in its scroll container: a caption for screen readers, the column headers, a row per item.
 * `empty` stands instead of the table when there are no items. `region` names the container and lets a keyboard
 * scroll it (TableRegion), for a table with no link to tab to.
 */
export function DataTable<T>(props: {
  caption: string;
  columns: readonly Column[];
  items: readonly T[];
  row: (item: T, index: number) => Child;
  empty?: Child;
  region?: string;
  id?: string;
  class?: string;
}) {
  if (props.items.length === 0 && props.empty !== undefined) return <>{props.empty}</>;
  const table = (
    <table id={props.id} class={props.class}>
      <caption class="visually-hidden">{props.caption}</caption>
      <thead>
        <tr>
          {props.columns.map((c) =>
            typeof c === 'string' ? (
              <th scope="col">{c}</th>
            ) : (
              <th scope="col" class={c.class}>
                {c.label}
              </th>
            ),
          )}
        </tr>
      </thead>
      <tbody>{props.items.map((item, i) => props.row(item, i))}</tbody>
    </table>
  );
  return props.region === undefined ? <div class="table-wrap">{table}</div> : <TableRegion label={props.region}>{table}</TableRegion>;
}

export type BadgeTone = 'ok' | 'warn' | 'bad' | 'info' | 'neutral';

export const Badge: FC<{ tone: BadgeTone; children: Child }> = ({ tone, children }) => (
  <span class={tone === 'neutral' ? 'badge' : `badge ${tone}`}>{children}</span>
);

export const FlashMessage: FC<{ flash: Flash | null }> = ({ flash }) =>
  flash ? (
    <div class={`flash ${flash.kind}`} role={flash.kind === 'error' ? 'alert' : 'status'}>
      <div>{flash.message}</div>
      {flash.links !== undefined && flash.links.length > 0 && (
        <ul class="flash-links">
          {flash.links.map((l) => (
            <li>
              <a href={l.href}>{l.label}</a>
            </li>
          ))}
        </ul>
      )}
      {flash.secret !== undefined && (
        <div class="secret">
          <code id="flash-secret">{flash.secret}</code>
          <button type="button" class="secondary" data-copy="flash-secret">
            Copy
          </button>
        </div>
      )}
    </div>
  ) : null;

/** A value with a copy button beside it (DNS records, ids). `id` must be unique on the page. */
export const Copyable: FC<{ id: string; value: string; label: string }> = ({ id, value, label }) => (
  <span class="row">
    <code id={id}>{value}</code>
    <button type="button" class="secondary" data-copy={id} aria-label={`Copy ${label}`}>
      Copy
    </button>
  </span>
);

/** A muted dash where there is no value. */
export const Dash: FC = () => <span class="muted">-</span>;

/** A time (ms, or an ISO timestamp as the API's resources give it), rendered as UTC text in a <time> element (or a dash). */
export const Time: FC<{ at: number | string | null | undefined }> = ({ at }) => {
  if (at === null || at === undefined) return <Dash />;
  const iso = new Date(at).toISOString();
  return <time datetime={iso}>{iso.replace('T', ' ').slice(0, 19)} UTC</time>;
};

/** The signed-in page frame: skip link, header with sign-out, navigation, the flash, then the page. */
export const Page: FC<PropsWithChildren<{ title: string; current: NavHref; csrf: string; flash: Flash | null }>> = ({
  title,
  current,
  csrf,
  flash,
  children,
}) => (
  <Document title={title}>
    <a class="skip-link" href="#main">
      Skip to content
    </a>
    <header class="site-header">
      <a class="brand" href="/dashboard">
        Mailstead
      </a>
      <form method="post" action="/dashboard/sign-out" class="inline">
        <CsrfField token={csrf} />
        <button type="submit" class="button">
          Sign out
        </button>
      </form>
    </header>
    <div class="layout">
      <nav class="site-nav" aria-label="Dashboard">
        <ul>
          {NAV.map((item) => (
            <li>
              <a href={item.href} aria-current={item.href === current ? 'page' : undefined}>
                {item.label}
              </a>
            </li>
          ))}
        </ul>
        <p class="nav-foot">
          <a href="/docs">API reference</a>
        </p>
      </nav>
      <main id="main" tabindex={-1}>
        <h1>{title}</h1>
        <FlashMessage flash={flash} />
        {children}
      </main>
    </div>
  </Document>
);
