import { freePort } from './free-port.js';

/** The four ports one haproxy listens on (docs/operating/several-nodes/haproxy.cfg's `LB_*_PORT`). */
export interface BalancerPorts {
  http: number;
  smtp: number;
  submission: number;
  submissions: number;
}

/** Four free ports for a haproxy on loopback. */
export async function balancerPorts(): Promise<BalancerPorts> {
  return { http: await freePort(), smtp: await freePort(), submission: await freePort(), submissions: await freePort() };
}

/**
 * The environment that the shipped haproxy.cfg reads its `${...}` variables from, for a haproxy on 127.0.0.1 in front
 * of nodes at `addresses` (NODE1_ADDR, NODE2_ADDR...), each listening on `nodePorts`; PATH kept, nothing else of this
 * process's environment. The tests and bench:several-nodes add what they vary (LB_CHECK_INTER, LB_HTTP_BALANCE).
 */
export function haproxyEnv(lb: BalancerPorts, addresses: readonly string[], nodePorts: BalancerPorts): Record<string, string> {
  return {
    PATH: process.env.PATH ?? '',
    LB_ADDR: '127.0.0.1',
    LB_HTTP_PORT: String(lb.http),
    LB_SMTP_PORT: String(lb.smtp),
    LB_SUBMISSION_PORT: String(lb.submission),
    LB_SUBMISSIONS_PORT: String(lb.submissions),
    NODE_HTTP_PORT: String(nodePorts.http),
    NODE_SMTP_PORT: String(nodePorts.smtp),
    NODE_SUBMISSION_PORT: String(nodePorts.submission),
    NODE_SUBMISSIONS_PORT: String(nodePorts.submissions),
    ...Object.fromEntries(addresses.map((a, i) => [`NODE${i + 1}_ADDR`, a])),
  };
}
