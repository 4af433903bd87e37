/**
 * The 14 scopes of docs/api/contract.md, and the two of docs/api/decisions.md section 9 (an account's own templates);
 * each endpoint needs exactly one.
 */
export const SCOPES = [
  'emails:send',
  'emails:read',
  'domains:read',
  'domains:write',
  'keys:read',
  'keys:write',
  'accounts:read',
  'accounts:write',
  'webhooks:read',
  'webhooks:write',
  'suppressions:read',
  'suppressions:write',
  'database:read',
  'database:write',
  'templates:read',
  'templates:write',
] as const;

export type Scope = (typeof SCOPES)[number];

export function isScope(s: string): s is Scope {
  return (SCOPES as readonly string[]).includes(s);
}
