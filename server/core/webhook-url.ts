import { isIP } from 'node:net';
import { type TargetCheck, resolveHost } from '../shared/egress.js';
import type { Deps } from './deps.js';
import { ApiError } from '../shared/errors.js';

export const MAX_WEBHOOK_URL_LENGTH = 2000;

/**
 * The `format uri` of docs/api/contract.md: RFC 3986's URI grammar. No space, no control character, nothing beyond ASCII (an IRI's
 * characters are written percent-encoded, a host as punycode), `%` only as a percent-encoded octet, brackets only
 * around an IP literal host, one `#`: so the URL the service stores and posts to is the one the client sent, and
 * what the API document's schema (ajv's `uri`) accepts.
 */
const PCT_ENCODED = '%[0-9A-Fa-f]{2}';
const UNRESERVED = 'A-Za-z0-9\\-._~';
const SUB_DELIMS = "!$&'()*+,;=";
const PCHAR = `(?:[${UNRESERVED}${SUB_DELIMS}:@]|${PCT_ENCODED})`;
const USERINFO = `(?:[${UNRESERVED}${SUB_DELIMS}:]|${PCT_ENCODED})*`;
/** An IPv6 address (its exact form is left to the URL parser) or an IPvFuture, in brackets. */
const IP_LITERAL = `\\[(?:[0-9A-Fa-f:.]+|[vV][0-9A-Fa-f]+\\.[${UNRESERVED}${SUB_DELIMS}:]+)\\]`;
const REG_NAME = `(?:[${UNRESERVED}${SUB_DELIMS}]|${PCT_ENCODED})*`;
const AUTHORITY = `(?:${USERINFO}@)?(?:${IP_LITERAL}|${REG_NAME})(?::[0-9]*)?`;
const PATH_ABEMPTY = `(?:/${PCHAR}*)*`;
const HIER_PART = `(?://${AUTHORITY}${PATH_ABEMPTY}|/(?:${PCHAR}+${PATH_ABEMPTY})?|${PCHAR}+${PATH_ABEMPTY}|)`;
const QUERY_OR_FRAGMENT = `(?:${PCHAR}|[/?])*`;
/** RFC 3986's URI: scheme ":" hier-part [ "?" query ] [ "#" fragment ], its components as its ABNF has them. */
const URI_SYNTAX = new RegExp(`^[A-Za-z][A-Za-z0-9+.-]*:${HIER_PART}(?:\\?${QUERY_OR_FRAGMENT})?(?:#${QUERY_OR_FRAGMENT})?$`);

/** The form the body's `url` must have before any rule of the service is applied (else 422 invalid_request). */
export function isAbsoluteUri(raw: string): boolean {
  return URI_SYNTAX.test(raw) && URL.canParse(raw);
}

/**
 * A webhook URL as the API accepts it: https, no user or password, 1 to 2000 characters, a host. The WHATWG parser
 * rewrites odd IPv4 spellings (`0x7f000001`, `2130706433`, `0177.1`) to the dotted address they mean, and IPv6
 * literals to their compressed form, so resolveTarget judges the address itself, never its spelling.
 */
export function parseWebhookUrl(raw: string): URL {
  if (raw.length === 0) throw new ApiError('invalid_url', 'The URL is empty.');
  if (raw.length > MAX_WEBHOOK_URL_LENGTH) throw new ApiError('invalid_url', `The URL is longer than ${MAX_WEBHOOK_URL_LENGTH} characters.`);
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ApiError('invalid_url', 'The URL is not a valid absolute URL.');
  }
  if (url.protocol !== 'https:') throw new ApiError('invalid_url', 'The URL must use https.');
  if (url.username !== '' || url.password !== '') throw new ApiError('invalid_url', 'The URL must not carry a user name or password.');
  if (url.hostname === '' || url.hostname === '.') throw new ApiError('invalid_url', 'The URL has no host.');
  // The WHATWG parser keeps 1 to 65535 and turns the default 443 into ''; 0 is no port anything listens on.
  if (url.port === '0') throw new ApiError('invalid_url', 'The URL port must be 1 to 65535.');
  return url;
}

/** The host of a URL as an address or a DNS name: IPv6 brackets and a final root dot removed. */
export function targetHost(url: URL): string {
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
  return isIP(host) === 0 ? host.replace(/\.$/, '').toLowerCase() : host;
}

/**
 * The addresses a webhook post may go to: an IP-literal host as is, else the A and AAAA answers through deps.resolver
 * (DNS_SERVERS). `blocked` when ANY address is reserved, since a name with one public and one private answer would let
 * the connection land on the private one; `dns_error` when nothing resolves. ALLOW_PRIVATE_TARGETS lifts the block.
 */
export type { TargetCheck };

export function resolveTarget(deps: Pick<Deps, 'resolver' | 'config'>, url: URL): Promise<TargetCheck> {
  return resolveHost(deps, targetHost(url));
}

/**
 * The creation-time check of docs/api/contract.md in one call: parseWebhookUrl, then resolveTarget, a refusal of either being
 * `422 invalid_url` (a blocked address or a name that does not resolve to a public host), with a message that names
 * the reason but never an address.
 */
export async function checkWebhookUrl(deps: Pick<Deps, 'resolver' | 'config'>, raw: string): Promise<URL> {
  const url = parseWebhookUrl(raw);
  const check = await resolveTarget(deps, url);
  if (check.kind === 'blocked') throw new ApiError('invalid_url', 'The URL host resolves to a private, loopback or reserved address.');
  if (check.kind === 'dns_error') throw new ApiError('invalid_url', 'The URL host does not resolve to an address.');
  return url;
}
