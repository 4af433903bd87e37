import type { FC } from 'hono/jsx';
import { AttachmentsSection, HeadersSection, RawSourceSection } from './message-sections.js';
import { CAPTURE_LIMIT } from '../../server/core/capture-store.js';
import { formatCount } from '../format.js';
import type { CapturedEntry } from '../queries/captured.js';
import type { DkimKeySource, DkimVerdict, MessageParts } from '../queries/captured-message.js';
import { Badge, type BadgeTone, DataTable, Time } from '../ui.js';

/** The pieces of the captured-mail pages (dashboard/pages/captured.tsx). */

/** Where each captured message lives: one recipient's copy of one email. */
export function capturedPath(emailId: string, recipient: string, part: '' | '/html' | '/raw' = ''): string {
  return `/dashboard/captured/${emailId}${part}?recipient=${encodeURIComponent(recipient)}`;
}

/** How a DKIM result reads at a glance (RFC 8601 result names, as mailauth gives them). */
export const DKIM_TONES: Record<string, BadgeTone> = {
  pass: 'ok',
  fail: 'bad',
  permerror: 'bad',
  policy: 'bad',
  neutral: 'warn',
  temperror: 'warn',
  temperr: 'warn',
  none: 'neutral',
};

export const ModeNotice: FC<{ capturing: boolean; kept: number }> = ({ capturing, kept }) =>
  capturing ? (
    <p class="panel">
      <Badge tone="info">capture mode</Badge> This server runs with <code>DELIVERY_MODE=capture</code>: nothing leaves the machine. Each recipient's message is
      kept here exactly as it would have gone out, signed; the newest {formatCount(CAPTURE_LIMIT)} are kept ({formatCount(kept)} now).
    </p>
  ) : (
    <div class="panel" role="note">
      <p>
        <Badge tone="neutral">not capturing</Badge> This server delivers mail (<code>DELIVERY_MODE=direct</code>): it captures nothing and keeps no message
        content. Start it with <code>DELIVERY_MODE=capture</code> (development only) to capture mail here instead of sending it.
      </p>
      {kept > 0 && (
        <p>
          {formatCount(kept)} message{kept === 1 ? ' was' : 's were'} captured by an earlier run in capture mode: listed below, but their content opens only
          while the server captures (as <code>GET /emails/{'{id}'}/message</code> answers).
        </p>
      )}
    </div>
  );

export const SearchForm: FC<{ search: string }> = ({ search }) => (
  <form method="get" action="/dashboard/captured" class="panel" role="search">
    <div class="form-grid">
      <div class="field">
        <label for="captured-search">Recipient or subject</label>
        <input id="captured-search" name="q" type="search" value={search} maxlength={320} />
      </div>
      <div class="row">
        <button type="submit">Search</button>
        {search !== '' && (
          <a class="button secondary" href="/dashboard/captured">
            Show all
          </a>
        )}
      </div>
    </div>
  </form>
);

export const CapturedTable: FC<{ entries: CapturedEntry[]; linked: boolean; empty: string }> = ({ entries, linked, empty }) => (
  <DataTable
    caption="Captured messages, newest first"
    columns={['Captured', 'Subject', 'To', 'From', 'Account']}
    items={entries}
    empty={<p class="panel">{empty}</p>}
    row={(e) => (
      <tr>
        <td>
          <Time at={e.capturedAt} />
        </td>
        <td>{linked ? <a href={capturedPath(e.emailId, e.recipient)}>{e.subject || '(no subject)'}</a> : e.subject || '(no subject)'}</td>
        <td>{e.recipient}</td>
        <td>{e.from}</td>
        <td>{e.accountName}</td>
      </tr>
    )}
  />
);

export const MessageFacts: FC<{ entry: CapturedEntry; others: string[] }> = ({ entry, others }) => (
  <dl class="facts panel">
    <dt>Captured</dt>
    <dd>
      <Time at={entry.capturedAt} />
    </dd>
    <dt>Account</dt>
    <dd>
      <bdi>{entry.accountName}</bdi> <code class="muted">{entry.accountId}</code>
    </dd>
    <dt>From</dt>
    <dd>{entry.from}</dd>
    <dt>To</dt>
    <dd>{entry.recipient}</dd>
    <dt>Email</dt>
    <dd>
      <a href={`/dashboard/emails/${entry.emailId}`}>{entry.emailId}</a> in the send log
    </dd>
    {others.length > 0 && (
      <>
        <dt>Also captured for</dt>
        <dd>
          <ul class="plain-list">
            {others.map((r) => (
              <li>
                <a href={capturedPath(entry.emailId, r)}>{r}</a>
              </li>
            ))}
          </ul>
        </dd>
      </>
    )}
  </dl>
);

/** Which key a verdict was reached with, in words (after the result: "pass (DNS)"); null when no key was read. */
export function keySourceWords(key: DkimKeySource): string | null {
  switch (key.from) {
    case 'dns':
      return 'DNS';
    case 'held':
      return `verified against the key Mailstead holds; DNS ${key.dns === 'none' ? 'has none' : 'did not answer'}`;
    case 'none':
      return 'no key in DNS, and Mailstead holds none for this domain and selector';
    case 'unread':
      return null;
  }
}

export const DkimSection: FC<{ verdict: DkimVerdict }> = ({ verdict }) => (
  <section aria-labelledby="dkim">
    <h2 id="dkim">DKIM</h2>
    <div class="panel">
      {!verdict.ok ? (
        <p>
          <Badge tone="warn">not checked</Badge> The signature could not be checked: {verdict.error}
        </p>
      ) : verdict.signatures.length === 0 ? (
        <p>
          <Badge tone="neutral">none</Badge> The message carries no DKIM signature.
        </p>
      ) : (
        <ul class="plain-list dkim-verdicts">
          {verdict.signatures.map((s) => (
            <li>
              <Badge tone={DKIM_TONES[s.result] ?? 'warn'}>{s.result}</Badge>{' '}
              {keySourceWords(s.key) !== null && (
                <>
                  <span class="key-source">({keySourceWords(s.key)})</span>{' '}
                </>
              )}
              signed by <strong>{s.domain}</strong>
              {s.selector && (
                <>
                  {' '}
                  with selector <code>{s.selector}</code>
                </>
              )}
              {s.comment && <span class="muted"> ({s.comment})</span>}
              <div class="muted">
                <code>{s.info}</code>
              </div>
            </li>
          ))}
        </ul>
      )}
      <p class="muted">
        Checked now with mailauth against the signing domain's key as this server's DNS resolver finds it. Where DNS has no key (a capture-mode name such as{' '}
        <code>shop.test</code>, or a Signing record not yet published) it is checked against the public key Mailstead holds for that domain and selector
        instead, the one the domain's Signing record publishes: a receiver reads DNS only, so publish that record before sending for real.
      </p>
    </div>
  </section>
);

export const PartsSections: FC<{ entry: CapturedEntry; parts: MessageParts; raw: string }> = ({ entry, parts, raw }) => (
  <>
    <section aria-labelledby="html-part">
      <h2 id="html-part">HTML part</h2>
      {parts.html === null ? (
        <p class="muted">This message has no HTML part.</p>
      ) : (
        <iframe
          class="message-frame"
          sandbox=""
          src={capturedPath(entry.emailId, entry.recipient, '/html')}
          title={`HTML part of the message to ${entry.recipient}`}
          referrerpolicy="no-referrer"
        ></iframe>
      )}
    </section>
    <section aria-labelledby="text-part">
      <h2 id="text-part">Text part</h2>
      {parts.text === null ? (
        <p class="muted">This message has no text part.</p>
      ) : (
        <pre tabindex={0} aria-labelledby="text-part" class="text-part">
          {parts.text}
        </pre>
      )}
    </section>
    <AttachmentsSection attachments={parts.attachments} />
    <HeadersSection headers={parts.headers} />
    <RawSourceSection download={capturedPath(entry.emailId, entry.recipient, '/raw')} raw={raw} />
  </>
);
