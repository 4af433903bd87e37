import { afterAll, beforeAll, expect, it } from 'vitest';
import type { InboundServer } from '../mta/inbound/server.js';
import { inboundServerFor } from './helpers/inbound-server.js';
import { loadOrCreateSmtpTls } from '../mta/inbound/tls.js';
import { RawSmtp } from './helpers/raw-smtp.js';
import { type TestService, startService } from './helpers/service.js';

/**
 * docs/api/behaviour.md (Inbound SMTP): "A client that talks before the banner ... gets 421 and is disconnected".
 * smtp-server only checks whole command lines when it dispatches them: a client that sends its command before the
 * banner but holds back the line end until after it is served normally (a pre-greeting talker goes undetected).
 */

/**
 * Commands sent before the banner are refused and the connection closed. smtp-server refuses a
 * whole command line sent early; the start of one whose CRLF is held back until after the banner got a normal 250.
 */

let service: TestService;
let inbound: InboundServer;
let port: number;

beforeAll(async () => {
  service = await startService();
  inbound = inboundServerFor(service.deps, loadOrCreateSmtpTls(service.deps.config));
  port = await inbound.listen('127.0.0.1', 0);
}, 60_000);
afterAll(async () => {
  await inbound?.close();
  await service?.close();
});

it('bytes of a command sent before the banner are refused with 421 and the connection closed, even without their CRLF yet', async () => {
  const { client } = await RawSmtp.connect(port, { greet: false });
  try {
    client.write('EHLO early.example'); // before the banner (sent ~100 ms after connect)
    const banner = await client.reply();
    client.write('\r\n');
    const answer = await client.reply();
    // 421 (for the bytes before the banner) and a closed connection; it was the 220 banner, then 250 to the EHLO.
    expect(
      [banner, answer].some((r) => r.startsWith('421 ')),
      JSON.stringify([banner, answer]),
    ).toBe(true);
    expect(await client.closedByServer(2000)).toBe(true);
  } finally {
    client.close();
  }
});
