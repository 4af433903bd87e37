import { isIP } from 'node:net';
import type { Config } from './config.js';

/**
 * How outbound mail leaves: `direct` (to each recipient's MX, or through SMTP_RELAY_URL when set) is the only mode
 * today. DELIVERY_MODE (issue 13, local capture) will make it a setting; until then there is nothing to read.
 */
export const DELIVERY_MODE = 'direct';

/** `scheme://host:port`, an IPv6 host in brackets. */
export function listenUrl(scheme: 'http' | 'smtp', host: string, port: number): string {
  return `${scheme}://${isIP(host) === 6 ? `[${host}]` : host}:${port}`;
}

/**
 * The fields of the `server.started` line, logged once everything listens: where (HTTP, and SMTP when it listens),
 * the state directory, how mail leaves (the relay named without its credentials) and the name the server goes by.
 */
export function startLine(config: Config, listening: { httpPort: number; smtpPort: number | null }): Record<string, unknown> {
  const relay = config.smtpRelayUrl;
  return {
    http: listenUrl('http', config.httpHost, listening.httpPort),
    smtp: listening.smtpPort === null ? null : listenUrl('smtp', config.smtpHost, listening.smtpPort),
    dataDir: config.dataDir,
    deliveryMode: DELIVERY_MODE,
    relay: relay ? `${relay.protocol}//${relay.host}` : null,
    mailHostname: config.mailHostname,
    metrics: config.metricsToken === null ? 'open' : 'token',
  };
}
