import type { FC } from 'hono/jsx';
import type { DomainView } from '../../server/core/domains.js';
import { TEST_SEND_MODES, type TestSendMode } from '../actions/test-email.js';
import { Badge, CsrfField } from '../ui.js';

/** The domain page's test email: how it will go (TEST_SEND_MODES), and the form (one field: the recipient). */
export const TestEmailSection: FC<{ view: DomainView; mode: TestSendMode; to: string; csrf: string }> = ({ view, mode, to, csrf }) => (
  <section class="panel" aria-labelledby="test-email-heading" id="test-email">
    <h2 id="test-email-heading">Send a test email</h2>
    <p>
      <Badge tone={mode === 'send' ? 'ok' : 'info'}>{TEST_SEND_MODES[mode].label}</Badge> <span class="muted">{TEST_SEND_MODES[mode].explains(view.name)}</span>
    </p>
    <form method="post" action={`/dashboard/domains/${view.id}/test-email`} class="row test-email">
      <CsrfField token={csrf} />
      <label for="test-email-to">To</label>
      {/* Plain text: the address is judged by POST /emails's rule alone, and its refusal is shown. */}
      <input id="test-email-to" name="to" type="text" inputmode="email" autocomplete="email" required maxlength={320} value={to} />
      <button type="submit">Send test email</button>
    </form>
  </section>
);
