import { type Socket, connect } from 'node:net';
import { type TLSSocket, connect as tlsConnect } from 'node:tls';

/**
 * A bare submission client for the refusal tests: it writes exactly the commands given, reads every reply whole
 * (multi-line ones as one string) and can upgrade with STARTTLS or start in TLS, from a chosen loopback source address
 * (the server counts failed authentications per address, so a test that must not share its count with another
 * connects from an address of its own). Certificates are not verified: the test server's pair is self-signed.
 */
export class SubmissionClient {
  private buffer = '';
  private waiting: (() => void) | null = null;
  closed = false;

  private constructor(private socket: Socket | TLSSocket) {
    this.listen(socket);
  }

  private listen(socket: Socket | TLSSocket): void {
    socket.on('data', (c: Buffer) => {
      this.buffer += c.toString('latin1');
      this.waiting?.();
    });
    socket.on('close', () => {
      this.closed = true;
      this.waiting?.();
    });
    socket.on('error', () => undefined);
  }

  /** Connects (in TLS from the first byte with `tls`) from `localAddress` and reads the banner. */
  static async connect(port: number, opts: { tls?: boolean; localAddress?: string } = {}): Promise<{ client: SubmissionClient; banner: string }> {
    const plain = connect({ port, host: '127.0.0.1', localAddress: opts.localAddress ?? '127.0.0.1' });
    await new Promise<void>((resolve, reject) => {
      plain.once('connect', () => resolve());
      plain.once('error', reject);
    });
    let socket: Socket = plain;
    if (opts.tls) {
      const secure = tlsConnect({ socket: plain, rejectUnauthorized: false });
      await new Promise<void>((resolve, reject) => {
        secure.once('secureConnect', () => resolve());
        secure.once('error', reject);
      });
      socket = secure;
    }
    const client = new SubmissionClient(socket);
    return { client, banner: await client.reply() };
  }

  /** The next complete reply (lines joined by LF), or '' once the server has closed without one. */
  async reply(timeoutMs = 10_000): Promise<string> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const m = /^(?:\d{3}-[^\n]*\n)*\d{3}(?: [^\n]*)?\r?\n/.exec(this.buffer);
      if (m) {
        this.buffer = this.buffer.slice(m[0].length);
        return m[0].trimEnd().replace(/\r\n/g, '\n');
      }
      if (this.closed) return '';
      if (Date.now() > deadline) throw new Error(`no reply within ${timeoutMs} ms; have: ${JSON.stringify(this.buffer)}`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, 50);
        this.waiting = () => {
          clearTimeout(t);
          resolve();
        };
      });
      this.waiting = null;
    }
  }

  write(data: string | Buffer): void {
    this.socket.write(data);
  }

  /** One command line (CRLF added) and its reply. */
  async command(line: string): Promise<string> {
    this.write(`${line}\r\n`);
    return this.reply();
  }

  /** STARTTLS; on its 220 the connection continues in TLS. Returns the reply to STARTTLS. */
  async startTls(): Promise<string> {
    const answer = await this.command('STARTTLS');
    if (!answer.startsWith('220')) return answer;
    const plain = this.socket;
    plain.removeAllListeners('data');
    plain.removeAllListeners('close');
    const secure = tlsConnect({ socket: plain, rejectUnauthorized: false });
    await new Promise<void>((resolve, reject) => {
      secure.once('secureConnect', () => resolve());
      secure.once('error', reject);
    });
    this.socket = secure;
    this.listen(secure);
    return answer;
  }

  /** AUTH PLAIN with the initial response: authorization identity empty, then user name and password. */
  authPlain(user: string, password: string): Promise<string> {
    return this.command(`AUTH PLAIN ${Buffer.from(`\0${user}\0${password}`).toString('base64')}`);
  }

  /** AUTH LOGIN: the user name and the password each answering a 334 challenge; the last reply (or the first non-334). */
  async authLogin(user: string, password: string): Promise<string> {
    const first = await this.command('AUTH LOGIN');
    if (!first.startsWith('334')) return first;
    const second = await this.command(Buffer.from(user).toString('base64'));
    if (!second.startsWith('334')) return second;
    return this.command(Buffer.from(password).toString('base64'));
  }

  /**
   * DATA, then the message (dot-stuffed, ending CRLF added when missing) and the final dot: the reply to DATA when it
   * is not 354, else the reply to the message.
   */
  async data(message: string | Buffer): Promise<string> {
    const go = await this.command('DATA');
    if (!go.startsWith('354')) return go;
    let text = Buffer.isBuffer(message) ? message.toString('latin1') : message;
    if (!text.endsWith('\r\n')) text += '\r\n';
    this.write(Buffer.from(text.replace(/^\./gm, '..'), 'latin1'));
    this.write('.\r\n');
    return this.reply();
  }

  /** Waits until the server has closed the connection. */
  async closedByServer(timeoutMs = 10_000): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (!this.closed && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    return this.closed;
  }

  close(): void {
    this.socket.destroy();
  }
}

/** A message as an application would write it: CRLF line ends, the given headers in order, then a short body. */
export function message(headers: Record<string, string>, body = 'Hello from an application that only speaks SMTP.'): string {
  const head = Object.entries(headers)
    .map(([k, v]) => `${k}: ${v}`)
    .join('\r\n');
  return `${head}\r\n\r\n${body.replace(/\r?\n/g, '\r\n')}\r\n`;
}
