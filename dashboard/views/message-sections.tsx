import type { FC } from 'hono/jsx';
import { formatBytes, formatCount } from '../format.js';
import { Badge } from '../ui.js';
import type { MessageParts } from '../queries/captured-message.js';

/** The sections a received or captured message's page shares: its attachments, its headers and its source. */

/** Filenames are isolated (<bdi>): a stranger's bidi controls cannot reverse the words after them. */
export const AttachmentsSection: FC<{ attachments: MessageParts['attachments'] }> = ({ attachments }) =>
  attachments.length === 0 ? null : (
    <section aria-labelledby="attachments">
      <h2 id="attachments">Attachments</h2>
      <ul>
        {attachments.map((a) => (
          <li data-attachment={a.inline ? 'inline' : 'attachment'}>
            <bdi>{a.filename}</bdi>{' '}
            <span class="muted">
              ({a.contentType}, <span title={`${formatCount(a.size)} bytes`}>{formatBytes(a.size)}</span>)
            </span>
            {a.inline && (
              <>
                {' '}
                <Badge tone="info">inline</Badge>
                {a.contentId !== null && (
                  <>
                    {' '}
                    <code class="muted">cid:{a.contentId}</code>
                  </>
                )}
              </>
            )}
          </li>
        ))}
      </ul>
    </section>
  );

export const HeadersSection: FC<{ headers: MessageParts['headers'] }> = ({ headers }) => (
  <section aria-labelledby="headers">
    <h2 id="headers">Headers</h2>
    <div class="table-wrap">
      <table class="message-headers">
        <thead>
          <tr>
            <th scope="col">Header</th>
            <th scope="col">Value</th>
          </tr>
        </thead>
        <tbody>
          {headers.map((h) => (
            <tr>
              <th scope="row">{h.name}</th>
              <td>{h.value}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  </section>
);

/** The message as received, and a link (`download`) to it as a .eml file. */
export const RawSourceSection: FC<{ download: string; raw: string }> = ({ download, raw }) => (
  <section aria-labelledby="raw-source">
    <h2 id="raw-source">Raw source</h2>
    <p>
      <a class="button secondary" href={download} download>
        Download .eml
      </a>
    </p>
    <pre tabindex={0} aria-labelledby="raw-source" class="raw-source">
      {raw}
    </pre>
  </section>
);
