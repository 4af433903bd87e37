import type { FC } from 'hono/jsx';
import { AttachmentsSection, HeadersSection, RawSourceSection } from './message-sections.js';
import { OPERATOR_MAIL_LIMIT, OPERATOR_MESSAGE_BYTES, type OperatorMessageSummary } from '../../server/core/operator-mail.js';
import { formatCount } from '../format.js';
import type { MessageParts } from '../queries/captured-message.js';
import { DataTable, Time } from '../ui.js';

/** The pieces of the postmaster-mail pages (dashboard/pages/postmaster.tsx). */

export const postmasterPath = (id: string, part: '' | '/raw' = '') => `/dashboard/postmaster/${id}${part}`;

/** Who it says it is from: its From header, else the envelope sender, else the null sender. */
export const senderOf = (m: OperatorMessageSummary): string => m.fromHeader || m.mailFrom || '<> (null sender)';

export const PostmasterNotice: FC<{ hostname: string; kept: number }> = ({ hostname, kept }) => (
  <p class="panel">
    Mail sent to <code>postmaster@{hostname}</code> and <code>abuse@{hostname}</code>: other mail servers and people write here about this server's mail (RFC
    5321, RFC 2142). It is yours, not a customer's. The newest {formatCount(OPERATOR_MAIL_LIMIT)} messages are kept, the first{' '}
    {formatCount(OPERATOR_MESSAGE_BYTES / 1024)} KB of each ({formatCount(kept)} now); anyone can write to these addresses, so nothing here is verified.
  </p>
);

export const PostmasterTable: FC<{ entries: OperatorMessageSummary[]; empty: string }> = ({ entries, empty }) => (
  <DataTable
    caption="Mail to postmaster and abuse, newest first"
    columns={['Received', 'Subject', 'From', 'To', { label: 'Bytes', class: 'num' }]}
    items={entries}
    empty={<p class="panel">{empty}</p>}
    row={(m) => (
      <tr>
        <td>
          <Time at={m.receivedAt} />
        </td>
        <td>
          <a href={postmasterPath(m.id)}>
            <bdi>{m.subject || '(no subject)'}</bdi>
          </a>
        </td>
        <td>
          <bdi>{senderOf(m)}</bdi>
        </td>
        <td>{m.recipients.join(', ')}</td>
        <td class="num">{formatCount(m.size)}</td>
      </tr>
    )}
  />
);

export const PostmasterFacts: FC<{ entry: OperatorMessageSummary }> = ({ entry }) => (
  <dl class="facts panel">
    <dt>Received</dt>
    <dd>
      <Time at={entry.receivedAt} />
    </dd>
    <dt>From</dt>
    <dd>
      <bdi>{entry.fromHeader || '(no From header)'}</bdi>
    </dd>
    <dt>Envelope sender</dt>
    <dd>
      <bdi>{entry.mailFrom || '<> (null sender)'}</bdi>
    </dd>
    <dt>To</dt>
    <dd>{entry.recipients.join(', ')}</dd>
    <dt>Sent by</dt>
    <dd>
      <code>{entry.remoteAddress}</code> (EHLO <bdi>{entry.helo || '(none)'}</bdi>)
    </dd>
    <dt>Size</dt>
    <dd>
      {formatCount(entry.size)} bytes
      {entry.truncated && <> (only the first {formatCount(OPERATOR_MESSAGE_BYTES)} are kept)</>}
    </dd>
  </dl>
);

/** The message as text: never its HTML, which a stranger wrote (mailparser gives the text of an HTML-only message). */
export const PostmasterParts: FC<{ entry: OperatorMessageSummary; parts: MessageParts | null; raw: string }> = ({ entry, parts, raw }) => (
  <>
    <section aria-labelledby="text-part">
      <h2 id="text-part">Text</h2>
      {parts === null ? (
        <p class="muted">The message could not be parsed; its source is below.</p>
      ) : parts.text === null ? (
        <p class="muted">This message has no text.</p>
      ) : (
        <pre tabindex={0} aria-labelledby="text-part" class="text-part">
          {parts.text}
        </pre>
      )}
    </section>
    {parts !== null && <AttachmentsSection attachments={parts.attachments} />}
    {parts !== null && <HeadersSection headers={parts.headers} />}
    <RawSourceSection download={postmasterPath(entry.id, '/raw')} raw={raw} />
  </>
);
