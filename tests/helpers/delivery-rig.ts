import { createDeliveryEngine, type DeliveryEngine } from '../../mta/delivery-engine.js';
import { TestDnsServer } from './dns-server.js';
import { startService, type TestService } from './service.js';
import { SmtpSink } from './smtp-sink.js';

/** Short SMTP timeouts, so a test of a silent or refusing peer finishes in about a second. */
export const FAST_TIMEOUTS = { connectTimeoutMs: 1000, greetingTimeoutMs: 1000, socketTimeoutMs: 2000 };

/** What the delivery suites run against: a DNS server and an SMTP sink on loopback, the service pointed at both. */
export interface DeliveryRig {
  dns: TestDnsServer;
  sink: SmtpSink;
  service: TestService;
  engine: DeliveryEngine;
}

export async function startDeliveryRig(): Promise<DeliveryRig> {
  const dns = await TestDnsServer.start();
  const sink = await SmtpSink.start();
  const service = await startService({ DNS_SERVERS: dns.address, SMTP_DELIVERY_PORT: String(sink.port), ALLOW_PRIVATE_TARGETS: 'true' });
  return { dns, sink, service, engine: createDeliveryEngine(service.deps, { timeouts: FAST_TIMEOUTS }) };
}

export async function stopDeliveryRig(rig: Partial<DeliveryRig>): Promise<void> {
  await rig.service?.close();
  await rig.sink?.stop();
  await rig.dns?.stop();
}

/**
 * Before each test: DNS holds only example.net (MX mx.example.net at 127.0.0.1), and the sink accepts everything and
 * has received nothing.
 */
export function resetDeliveryRig({ dns, sink }: Pick<DeliveryRig, 'dns' | 'sink'>): void {
  dns.clear();
  sink.received = [];
  sink.attempts.clear();
  sink.rcpt = () => 'accept';
  sink.data = () => 'accept';
  dns.add('example.net', { type: 'MX', priority: 10, exchange: 'mx.example.net' });
  dns.add('mx.example.net', { type: 'A', address: '127.0.0.1' });
}
