/**
 * The built-in templates (docs/api/decisions.md section 2) as data: each names its variables (required or not, plain text or
 * an http(s) link, and how long it may be) and renders subject, html and text. Values are HTML-escaped in html; links
 * must be http(s), so a `javascript:` URL can never reach a recipient's mail client.
 */

export type VariableKind = 'text' | 'url';

/**
 * How long a variable may be, by where it ends up. `line`: rendered into the Subject or a short line of the body, at
 * most one header line (RFC 5322: 998 characters). `link`: a URL, as long as common servers take. `body`: free text of
 * the body, 100 KB of UTF-8.
 */
export const VARIABLE_LIMITS = {
  line: { max: 998, unit: 'characters' },
  link: { max: 8192, unit: 'characters' },
  body: { max: 100 * 1024, unit: 'bytes' },
} as const satisfies Record<string, { max: number; unit: 'characters' | 'bytes' }>;

export type VariableLimit = keyof typeof VARIABLE_LIMITS;

/** The whole rendered message (subject, html and text, UTF-8) may be at most 1 MB. */
export const MAX_RENDERED_BYTES = 1024 * 1024;

export interface VariableDef {
  required: boolean;
  kind: VariableKind;
  limit: VariableLimit;
}

export interface TemplateDef {
  /** What the template is for, one line (GET /templates shows it). */
  description: string;
  variables: Record<string, VariableDef>;
  subject(v: Vars): string;
  html(v: Vars, h: Vars): string;
  text(v: Vars): string;
}

export type Vars = Readonly<Record<string, string>>;

export interface Rendered {
  subject: string;
  html: string;
  text: string;
}

const text = (required = false, limit: VariableLimit = 'line'): VariableDef => ({ required, kind: 'text', limit });
const url = (required = true): VariableDef => ({ required, kind: 'url', limit: 'link' });

/** Characters as people count them: code points, not UTF-16 units. */
function characterCount(value: string, atMost: number): number {
  // A string of at most `atMost` UTF-16 units has at most that many code points: no need to walk it.
  if (value.length <= atMost) return value.length;
  let n = 0;
  for (const _ of value) n++;
  return n;
}

/** Why `value` is too long for `limit`, or null when it fits. */
export function variableTooLong(value: string, limit: VariableLimit): string | null {
  const { max, unit } = VARIABLE_LIMITS[limit];
  const size = unit === 'bytes' ? Buffer.byteLength(value, 'utf8') : characterCount(value, max);
  if (size <= max) return null;
  return unit === 'bytes' ? `must be at most ${max / 1024} KB (${max} bytes of UTF-8)` : `must be at most ${max} characters`;
}

/** Size in bytes of a rendered message: subject, html and text as UTF-8. */
export function renderedBytes(r: Rendered): number {
  return Buffer.byteLength(r.subject, 'utf8') + Buffer.byteLength(r.html, 'utf8') + Buffer.byteLength(r.text, 'utf8');
}

export function escapeHtml(value: string): string {
  return value.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

const page = (title: string, body: string) =>
  `<!doctype html><html><head><meta charset="utf-8"><title>${title}</title></head>` +
  `<body style="font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;color:#222;max-width:560px;margin:0 auto;padding:24px">${body}</body></html>`;

const button = (href: string, label: string) =>
  `<p><a href="${href}" style="display:inline-block;padding:10px 18px;background:#2454d6;color:#fff;border-radius:4px;text-decoration:none">${label}</a></p>`;

const row = (label: string, value: string | undefined) =>
  value === undefined ? '' : `<tr><td style="padding:4px 12px 4px 0;color:#666">${label}</td><td>${value}</td></tr>`;
const line = (label: string, value: string | undefined) => (value === undefined ? '' : `${label}: ${value}\n`);

export const TEMPLATES: Record<string, TemplateDef> = {
  receipt: {
    description: 'A payment receipt: its number, the date paid, the payment method and the total.',
    variables: { receiptNumber: text(), paidOn: text(), paymentMethod: text(), total: text(true) },
    subject: (v) => (v.receiptNumber ? `Your receipt ${v.receiptNumber}` : 'Your receipt'),
    html: (_v, h) =>
      page(
        'Receipt',
        `<h1 style="font-size:20px">Receipt${h.receiptNumber ? ` ${h.receiptNumber}` : ''}</h1><table>` +
          row('Paid on', h.paidOn) +
          row('Payment method', h.paymentMethod) +
          row('Total', `<strong>${h.total}</strong>`) +
          '</table><p>Thank you for your payment.</p>',
      ),
    text: (v) =>
      `Receipt${v.receiptNumber ? ` ${v.receiptNumber}` : ''}\n\n${line('Paid on', v.paidOn)}${line('Payment method', v.paymentMethod)}Total: ${v.total}\n\nThank you for your payment.\n`,
  },
  welcome: {
    description: 'A welcome after sign-up, greeting the recipient by first name when one is given.',
    // `firstName`, not `name`: the template object's `name` is the template's own (docs/api/decisions.md section 2).
    variables: { firstName: text() },
    subject: () => 'Welcome',
    html: (_v, h) => page('Welcome', `<h1 style="font-size:20px">Welcome${h.firstName ? `, ${h.firstName}` : ''}!</h1><p>Your account is ready.</p>`),
    text: (v) => `Welcome${v.firstName ? `, ${v.firstName}` : ''}!\n\nYour account is ready.\n`,
  },
  'password-reset': {
    description: 'A password reset link, with how long it stays valid when given.',
    variables: { resetUrl: url(), expiresIn: text() },
    subject: () => 'Reset your password',
    html: (_v, h) =>
      page(
        'Reset your password',
        `<p>Someone asked to reset the password of your account. If it was you, choose a new one:</p>${button(h.resetUrl!, 'Reset password')}` +
          `<p style="color:#666">${h.expiresIn ? `This link expires in ${h.expiresIn}. ` : ''}If you did not ask for this, ignore this email.</p>`,
      ),
    text: (v) =>
      `Someone asked to reset the password of your account. If it was you, choose a new one:\n\n${v.resetUrl}\n\n${v.expiresIn ? `This link expires in ${v.expiresIn}. ` : ''}If you did not ask for this, ignore this email.\n`,
  },
  'magic-link': {
    description: 'A sign-in link.',
    variables: { url: url() },
    subject: () => 'Your sign-in link',
    html: (_v, h) =>
      page('Sign in', `<p>Use this link to sign in:</p>${button(h.url!, 'Sign in')}<p style="color:#666">If you did not ask for it, ignore this email.</p>`),
    text: (v) => `Use this link to sign in:\n\n${v.url}\n\nIf you did not ask for it, ignore this email.\n`,
  },
  'verify-email': {
    description: "A link that confirms the recipient's email address.",
    variables: { url: url() },
    subject: () => 'Confirm your email address',
    html: (_v, h) => page('Confirm your email address', `<p>Confirm that this is your email address:</p>${button(h.url!, 'Confirm address')}`),
    text: (v) => `Confirm that this is your email address:\n\n${v.url}\n`,
  },
  notification: {
    description: 'Free text: your own subject and body (line breaks in the body are kept).',
    variables: { subject: text(true), body: text(true, 'body') },
    subject: (v) => v.subject!,
    html: (_v, h) => page(h.subject!, `<p>${h.body!.replace(/\r?\n/g, '<br>')}</p>`),
    text: (v) => `${v.body}\n`,
  },
};

/** The template a name stands for, matched as an own key only ("constructor" must not find Object.prototype's). */
export function findTemplate(name: string): TemplateDef | undefined {
  return Object.hasOwn(TEMPLATES, name) ? TEMPLATES[name] : undefined;
}

/** Renders a template already validated against its variables. */
export function renderTemplate(name: string, vars: Vars): Rendered {
  const def = findTemplate(name);
  if (!def) throw new Error(`unknown template ${name}`);
  const escaped = Object.fromEntries(Object.entries(vars).map(([k, v]) => [k, escapeHtml(v)]));
  // A subject is one header line: line breaks in a variable become spaces.
  return {
    subject: def
      .subject(vars)
      .replace(/[\r\n]+/g, ' ')
      .trim(),
    html: def.html(vars, escaped),
    text: def.text(vars),
  };
}
