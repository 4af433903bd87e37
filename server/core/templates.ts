/**
 * The built-in templates (decisions.md section 2) as data: each names its variables (required or not, plain text or
 * an http(s) link) and renders subject, html and text. Values are HTML-escaped in html; links must be http(s), so a
 * `javascript:` URL can never reach a recipient's mail client.
 */

export type VariableKind = 'text' | 'url';

export interface TemplateDef {
  variables: Record<string, { required: boolean; kind: VariableKind }>;
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

const text = (required = false) => ({ required, kind: 'text' as const });
const url = (required = true) => ({ required, kind: 'url' as const });

export function escapeHtml(value: string): string {
  return value.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

const page = (title: string, body: string) =>
  `<!doctype html><html><head><meta charset="utf-8"><title>${title}</title></head>` +
  `<body style="font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;color:#222;max-width:560px;margin:0 auto;padding:24px">${body}</body></html>`;

const button = (href: string, label: string) =>
  `<p><a href="${href}" style="display:inline-block;padding:10px 18px;background:#2454d6;color:#fff;border-radius:4px;text-decoration:none">${label}</a></p>`;

const row = (label: string, value: string | undefined) => (value === undefined ? '' : `<tr><td style="padding:4px 12px 4px 0;color:#666">${label}</td><td>${value}</td></tr>`);
const line = (label: string, value: string | undefined) => (value === undefined ? '' : `${label}: ${value}\n`);

export const TEMPLATES: Record<string, TemplateDef> = {
  receipt: {
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
    text: (v) => `Receipt${v.receiptNumber ? ` ${v.receiptNumber}` : ''}\n\n${line('Paid on', v.paidOn)}${line('Payment method', v.paymentMethod)}Total: ${v.total}\n\nThank you for your payment.\n`,
  },
  welcome: {
    variables: { name: text() },
    subject: () => 'Welcome',
    html: (_v, h) => page('Welcome', `<h1 style="font-size:20px">Welcome${h.name ? `, ${h.name}` : ''}!</h1><p>Your account is ready.</p>`),
    text: (v) => `Welcome${v.name ? `, ${v.name}` : ''}!\n\nYour account is ready.\n`,
  },
  'password-reset': {
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
    variables: { url: url() },
    subject: () => 'Your sign-in link',
    html: (_v, h) => page('Sign in', `<p>Use this link to sign in:</p>${button(h.url!, 'Sign in')}<p style="color:#666">If you did not ask for it, ignore this email.</p>`),
    text: (v) => `Use this link to sign in:\n\n${v.url}\n\nIf you did not ask for it, ignore this email.\n`,
  },
  'verify-email': {
    variables: { url: url() },
    subject: () => 'Confirm your email address',
    html: (_v, h) => page('Confirm your email address', `<p>Confirm that this is your email address:</p>${button(h.url!, 'Confirm address')}`),
    text: (v) => `Confirm that this is your email address:\n\n${v.url}\n`,
  },
  notification: {
    variables: { subject: text(true), body: text(true) },
    subject: (v) => v.subject!,
    html: (_v, h) => page(h.subject!, `<p>${h.body!.replace(/\r?\n/g, '<br>')}</p>`),
    text: (v) => `${v.body}\n`,
  },
};

/** Renders a template already validated against its variables. */
export function renderTemplate(name: string, vars: Vars): Rendered {
  const def = TEMPLATES[name];
  if (!def) throw new Error(`unknown template ${name}`);
  const escaped = Object.fromEntries(Object.entries(vars).map(([k, v]) => [k, escapeHtml(v)]));
  // A subject is one header line: line breaks in a variable become spaces.
  return { subject: def.subject(vars).replace(/[\r\n]+/g, ' ').trim(), html: def.html(vars, escaped), text: def.text(vars) };
}
