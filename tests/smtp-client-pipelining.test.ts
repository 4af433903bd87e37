import { type AddressInfo, type Server, type Socket, createServer } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import type { Target } from '../mta/routing.js';
import { openSession } from '../mta/smtp-client.js';

/**
 * The outbound client's round trips: where the server offers PIPELINING (RFC 2920),
 * MAIL, RCPT and DATA leave in one write and the client waits for their replies together; where it does not, each
 * command waits for the reply to the one before. A scripted peer on loopback records which commands arrive in each
 * read before it answers them: a client that waits between commands shows up as one command per read.
 */

interface Peer {
  port: number;
  /** The commands of each read, in order (the message data not included). */
  reads: string[][];
  close(): Promise<void>;
}

async function startPeer(pipelining: boolean): Promise<Peer> {
  const reads: string[][] = [];
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => undefined);
    socket.write('220 peer.test ESMTP\r\n');
    let inData = false;
    let pending = '';
    socket.on('data', (chunk: Buffer) => {
      pending += chunk.toString('latin1');
      const commands: string[] = [];
      let out = '';
      for (;;) {
        if (inData) {
          const end = pending.indexOf('\r\n.\r\n');
          if (end === -1) break;
          pending = pending.slice(end + 5);
          inData = false;
          out += '250 2.0.0 queued\r\n';
          continue;
        }
        const eol = pending.indexOf('\r\n');
        if (eol === -1) break;
        const line = pending.slice(0, eol);
        pending = pending.slice(eol + 2);
        const verb = line.split(/[ :]/)[0]!.toUpperCase();
        commands.push(verb);
        if (verb === 'EHLO') out += `250-peer.test\r\n${pipelining ? '250-PIPELINING\r\n' : ''}250 8BITMIME\r\n`;
        else if (verb === 'DATA') {
          out += '354 go ahead\r\n';
          inData = true;
          // The data follows the 354 (or, pipelined, the DATA command's batch): keep what came after DATA.
          pending = `\r\n${pending}`;
        } else if (verb === 'QUIT') out += '221 bye\r\n';
        else out += '250 ok\r\n';
      }
      if (commands.length > 0) reads.push(commands);
      if (out) socket.write(out);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    reads,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

const opts = { name: 'mx.mailstead.test', connectTimeoutMs: 2000, greetingTimeoutMs: 2000, socketTimeoutMs: 2000 };
const message = Buffer.from('From: <a@sender.test>\r\nTo: <b@peer.test>\r\nSubject: hi\r\n\r\nHello.\r\n');

let peer: Peer | null = null;
afterEach(async () => {
  await peer?.close();
  peer = null;
});

async function deliverTwice(pipelining: boolean): Promise<string[][]> {
  peer = await startPeer(pipelining);
  const target: Target = { host: '127.0.0.1', addresses: ['127.0.0.1'], port: peer.port, secure: false, auth: null, relay: false };
  const session = await openSession([target], opts);
  for (const to of ['b@peer.test', 'c@peer.test']) {
    const sent = await session.send('bounce@sender.test', to, message);
    expect(sent.outcome.status).toBe('delivered');
  }
  await session.close();
  return peer.reads.filter((commands) => commands.some((c) => c === 'MAIL' || c === 'RCPT' || c === 'DATA'));
}

describe('the outbound SMTP client and PIPELINING', () => {
  it('sends MAIL, RCPT and DATA in one write to a server that offers PIPELINING: one round trip for the envelope', async () => {
    expect(await deliverTwice(true)).toEqual([
      ['MAIL', 'RCPT', 'DATA'],
      ['MAIL', 'RCPT', 'DATA'],
    ]);
  });

  it('waits for each reply before the next command where the server does not offer it', async () => {
    expect(await deliverTwice(false)).toEqual([['MAIL'], ['RCPT'], ['DATA'], ['MAIL'], ['RCPT'], ['DATA']]);
  });
});
