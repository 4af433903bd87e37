import { isIP } from 'node:net';
import type { Config } from '../shared/config.js';

/** `scheme://host:port`, an IPv6 host in brackets. */
export function listenUrl(scheme: 'http' | 'smtp', host: string, port: number): string {
  return `${scheme}://${isIP(host) === 6 ? `[${host}]` : host}:${port}`;
}

/**
 * The fields of the `server.started` line, logged once everything listens: where (HTTP, and SMTP when it listens),
 * the state directory and where the state lives, how mail leaves (DELIVERY_MODE, and the relay named without its credentials) and the name the
 * server goes by.
 */
/** What listens once a start is done: each port as bound, null when off (or when it could not listen). */
export interface Listening {
  httpPort: number;
  smtpPort: number | null;
  submissionPort: number | null;
  submissionsPort: number | null;
}

export function startLine(config: Config, listening: Listening): Record<string, unknown> {
  // In capture mode nothing leaves, through a relay or otherwise.
  const relay = config.deliveryMode === 'direct' ? config.smtpRelayUrl : null;
  return {
    http: listenUrl('http', config.httpHost, listening.httpPort),
    smtp: listening.smtpPort === null ? null : listenUrl('smtp', config.smtpHost, listening.smtpPort),
    // SMTP submission (docs/api/decisions.md section 10) on SMTP_HOST: the STARTTLS port and the implicit-TLS one.
    submissionPort: listening.submissionPort,
    submissionsPort: listening.submissionsPort,
    dataDir: config.dataDir,
    // Where the state lives: `sqlite` (in DATA_DIR) or `postgres`, with STATE_URL as stateUrl (its password hidden).
    state: config.state.engine,
    ...(config.state.engine === 'postgres' ? { stateUrl: config.state.target.shown } : {}),
    deliveryMode: config.deliveryMode,
    relay: relay ? `${relay.protocol}//${relay.host}` : null,
    mailHostname: config.mailHostname,
    metrics: config.metricsToken === null ? 'open' : 'token',
    // Behind a load balancer (docs/operating/behind-a-load-balancer.md): named only when set.
    ...(config.smtpProxyProtocol ? { smtpProxyProtocol: true } : {}),
    ...(config.trustProxy.entries.length > 0 ? { trustProxy: config.trustProxy.entries } : {}),
  };
}

/** What the server sends its parent over IPC once everything listens, when started with one (`npm run dev`). */
export const STARTED_EVENT = 'server.started';

export interface StartedMessage extends Listening {
  event: typeof STARTED_EVENT;
}
