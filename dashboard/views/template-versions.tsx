import type { FC } from 'hono/jsx';
import type { TemplateVersionView } from '../../server/core/template-catalog.js';
import { versionsPath } from '../actions/templates.js';
import type { DiffLine } from '../line-diff.js';
import { DataTable, Dash, PostButton, Time } from '../ui.js';

/** The versions page of a template: the kept versions, and a version's diff against the current one. */

/** The kept versions, newest first: compare one with the current one, or restore it as a new version. */
export const VersionTable: FC<{ accountId: string; name: string; current: number; versions: TemplateVersionView[]; csrf: string; compared: number | null }> = ({
  accountId,
  name,
  current,
  versions,
  csrf,
  compared,
}) => (
  <DataTable
    caption={`Kept versions of ${name}`}
    columns={['Version', 'Saved', 'Subject', 'Compare', 'Restore']}
    items={versions}
    id="version-list"
    row={(v) => (
      <tr aria-current={v.version === compared ? 'true' : undefined}>
        <td>
          {v.version}
          {v.version === current && ' (current)'}
        </td>
        <td>
          <Time at={v.createdAt} />
        </td>
        <td>{v.subject ?? <Dash />}</td>
        <td>
          {v.version === current ? (
            <Dash />
          ) : (
            <a href={`${versionsPath(accountId, name)}?compare=${v.version}#diff`} aria-label={`Compare version ${v.version} with the current one`}>
              Compare
            </a>
          )}
        </td>
        <td>
          {v.version === current ? (
            <Dash />
          ) : (
            <PostButton
              action={`${versionsPath(accountId, name)}/restore`}
              csrf={csrf}
              label="Restore as new version"
              accessibleLabel={`Restore as new version: version ${v.version}`}
              fields={{ version: String(v.version) }}
            />
          )}
        </td>
      </tr>
    )}
  />
);

export interface PartDiff {
  part: string;
  lines: DiffLine[];
}

const MARK: Record<DiffLine['op'], string> = { same: ' ', removed: '-', added: '+' };

/** The diff of a version against the current one, a part at a time (a part that did not change says so). */
export const DiffSection: FC<{ from: number; to: number; parts: PartDiff[] }> = ({ from, to, parts }) => (
  <section class="panel" aria-labelledby="diff-heading" id="diff">
    <h2 id="diff-heading">
      Version {from} against the current version {to}
    </h2>
    <p class="muted">
      Lines marked − are in version {from} only; lines marked + are in version {to} only.
    </p>
    {parts.map((p) => (
      <>
        <h3 id={`diff-${p.part}`}>{p.part}</h3>
        {p.lines.every((l) => l.op === 'same') ? (
          <p class="muted">No change.</p>
        ) : (
          <pre tabindex={0} aria-labelledby={`diff-${p.part}`} class="diff">
            {p.lines.map((l) => (
              <span class={`diff-${l.op}`}>
                {l.op === 'same' ? '' : <span class="visually-hidden">{l.op === 'added' ? 'added: ' : 'removed: '}</span>}
                {`${MARK[l.op]} ${l.text}\n`}
              </span>
            ))}
          </pre>
        )}
      </>
    ))}
  </section>
);
