/**
 * Whether a value is a plain http(s) link, as a template's `url` variable must be (docs/api/behaviour.md). What is
 * rendered is the value as given: the URL parser would drop tabs and line breaks, encode spaces and read `https:host`
 * or a backslash as `https://host/`, so the value itself must already be the plain link.
 */
export function isHttpUrl(value: string): boolean {
  if (!/^https?:\/\//i.test(value) || /[\s\x00-\x1f\x7f-\x9f\\\u2028\u2029]/.test(value)) return false;
  try {
    const u = new URL(value);
    return (u.protocol === 'https:' || u.protocol === 'http:') && u.hostname !== '';
  } catch {
    return false;
  }
}
