/**
 * A customer's database is an untrusted peer (docs/api/decisions.md section 13): its server, its triggers and its TLS
 * certificate write the text of the errors the service sees (a trigger can raise a message of megabytes). That text
 * is cut here, by one rule, before it is logged or stored (`lastError`, a queued write's error) or answered.
 */

/** The most characters of a customer database's error text the service keeps in one place. */
export const MAX_ERROR_TEXT = 1000;

/** `text` cut to at most `max` characters, the cut marked with an ellipsis; a surrogate pair is never split. */
export function cutErrorText(text: string, max = MAX_ERROR_TEXT): string {
  if (text.length <= max) return text;
  let end = Math.max(0, max - 1);
  const last = text.charCodeAt(end - 1);
  if (last >= 0xd800 && last <= 0xdbff) end -= 1;
  return `${text.slice(0, end)}…`;
}

/**
 * An error from a customer database as one text of at most `max` characters: `prefix`, its message (cut to what is
 * left), and its SQLSTATE in parentheses when `withCode` (kept whole, so a cut message still says which error it was).
 */
export function customerErrorText(err: unknown, opts: { prefix?: string; withCode?: boolean; max?: number } = {}): string {
  const { prefix = '', withCode = false, max = MAX_ERROR_TEXT } = opts;
  const message = err instanceof Error ? err.message : String(err);
  const code = (err as { code?: unknown } | null)?.code;
  const suffix = withCode && typeof code === 'string' ? ` (${cutErrorText(code, 20)})` : '';
  const room = Math.max(0, max - suffix.length);
  return `${cutErrorText(`${prefix}${message}`, room)}${suffix}`;
}
