import type { FC } from 'hono/jsx';
import type { EmailView } from '../../server/core/emails.js';
import { Badge, type BadgeTone } from '../ui.js';

/** The Email statuses of api.md and how the dashboard shows each. */
const STATUS_TONE: Record<EmailView['status'], BadgeTone> = { sent: 'info', failed: 'bad', sandboxed: 'neutral' };

/** The email's status (the API's), then the first outcomes recorded for any recipient (its *At timestamps). */
export const EmailStatusBadges: FC<{ email: EmailView }> = ({ email }) => (
  <span class="row">
    <Badge tone={STATUS_TONE[email.status]}>{email.status}</Badge>
    {email.deliveredAt && <Badge tone="ok">delivered</Badge>}
    {email.bouncedAt && <Badge tone="bad">bounced</Badge>}
    {email.complainedAt && <Badge tone="bad">complained</Badge>}
  </span>
);

/** The tone of one recorded outcome. */
export const OUTCOME_TONE: Record<string, BadgeTone> = { delivered: 'ok', bounced: 'bad', deferred: 'warn', complained: 'bad' };

/** The timeline's class of one outcome (.timeline li.ok/.bad/.warn). */
export const OUTCOME_CLASS: Record<string, 'ok' | 'bad' | 'warn'> = { delivered: 'ok', bounced: 'bad', deferred: 'warn', complained: 'bad' };
