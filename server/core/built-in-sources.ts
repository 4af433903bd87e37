/**
 * The built-in templates (templates.ts) written as Liquid, as GET /templates shows them so a team can copy one as the
 * start of its own ("Duplicate" in the dashboard). tests/built-in-sources.test.ts renders each through the language of
 * own templates and compares it with the built-in's own render, so the source shown is the one that renders it.
 */

export interface BuiltInSource {
  subject: string;
  html: string;
  text: string;
}

const page = (title: string, body: string) =>
  `<!doctype html><html><head><meta charset="utf-8"><title>${title}</title></head>` +
  `<body style="font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;color:#222;max-width:560px;margin:0 auto;padding:24px">${body}</body></html>`;

const button = (href: string, label: string) =>
  `<p><a href="${href}" style="display:inline-block;padding:10px 18px;background:#2454d6;color:#fff;border-radius:4px;text-decoration:none">${label}</a></p>`;

const row = (label: string, variable: string) =>
  `{% if ${variable} != nil %}<tr><td style="padding:4px 12px 4px 0;color:#666">${label}</td><td>{{ ${variable} }}</td></tr>{% endif %}`;
const line = (label: string, variable: string) => `{% if ${variable} != nil %}${label}: {{ ${variable} }}\n{% endif %}`;

export const BUILT_IN_SOURCES: Record<string, BuiltInSource> = {
  receipt: {
    subject: 'Your receipt{% if receiptNumber != blank %} {{ receiptNumber }}{% endif %}',
    html: page(
      'Receipt',
      '<h1 style="font-size:20px">Receipt{% if receiptNumber != blank %} {{ receiptNumber }}{% endif %}</h1><table>' +
        row('Paid on', 'paidOn') +
        row('Payment method', 'paymentMethod') +
        '<tr><td style="padding:4px 12px 4px 0;color:#666">Total</td><td><strong>{{ total }}</strong></td></tr>' +
        '</table><p>Thank you for your payment.</p>',
    ),
    text:
      'Receipt{% if receiptNumber != blank %} {{ receiptNumber }}{% endif %}\n\n' +
      line('Paid on', 'paidOn') +
      line('Payment method', 'paymentMethod') +
      'Total: {{ total }}\n\nThank you for your payment.\n',
  },
  welcome: {
    subject: 'Welcome',
    html: page('Welcome', '<h1 style="font-size:20px">Welcome{% if firstName != blank %}, {{ firstName }}{% endif %}!</h1><p>Your account is ready.</p>'),
    text: 'Welcome{% if firstName != blank %}, {{ firstName }}{% endif %}!\n\nYour account is ready.\n',
  },
  'password-reset': {
    subject: 'Reset your password',
    html: page(
      'Reset your password',
      `<p>Someone asked to reset the password of your account. If it was you, choose a new one:</p>${button('{{ resetUrl }}', 'Reset password')}` +
        '<p style="color:#666">{% if expiresIn != blank %}This link expires in {{ expiresIn }}. {% endif %}If you did not ask for this, ignore this email.</p>',
    ),
    text:
      'Someone asked to reset the password of your account. If it was you, choose a new one:\n\n{{ resetUrl }}\n\n' +
      '{% if expiresIn != blank %}This link expires in {{ expiresIn }}. {% endif %}If you did not ask for this, ignore this email.\n',
  },
  'magic-link': {
    subject: 'Your sign-in link',
    html: page(
      'Sign in',
      `<p>Use this link to sign in:</p>${button('{{ url }}', 'Sign in')}<p style="color:#666">If you did not ask for it, ignore this email.</p>`,
    ),
    text: 'Use this link to sign in:\n\n{{ url }}\n\nIf you did not ask for it, ignore this email.\n',
  },
  'verify-email': {
    subject: 'Confirm your email address',
    html: page('Confirm your email address', `<p>Confirm that this is your email address:</p>${button('{{ url }}', 'Confirm address')}`),
    text: 'Confirm that this is your email address:\n\n{{ url }}\n',
  },
  notification: {
    subject: '{{ subject }}',
    html: page('{{ subject }}', '<p>{{ body | newline_to_br }}</p>'),
    text: '{{ body }}\n',
  },
};
