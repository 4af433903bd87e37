import { type Socket, connect } from 'node:net';
import { connect as connectTls } from 'node:tls';

/**
 * A bare SMTP client for tests that must send what no well-behaved client would (bare LF, pipelined commands, bytes
 * before the banner, a half-sent DATA): it writes exactly the bytes given and reads replies (multi-line ones whole).
 */
export class RawSmtp {
  private buffer = '';
  private waiting: (() => void) | null = null;
  closed = false;

  private constructor(readonly socket: Socket) {
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

  /**
   * Connects; with `greet` (the default) waits for the 220 banner. `proxy`: written first, as a load balancer writes
   * its PROXY header (SMTP_PROXY_PROTOCOL). `localAddress`: the loopback address to connect from.
   */
  static async connect(
    port: number,
    opts: { greet?: boolean; proxy?: string | Buffer; localAddress?: string } = {},
  ): Promise<{ client: RawSmtp; banner: string }> {
    const socket = connect({ port, host: '127.0.0.1', localAddress: opts.localAddress });
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', () => resolve());
      socket.once('error', reject);
    });
    if (opts.proxy !== undefined) socket.write(opts.proxy);
    const client = new RawSmtp(socket);
    const banner = opts.greet === false ? '' : await client.reply();
    return { client, banner };
  }

  /**
   * Connects over implicit TLS (the certificate is not checked: tests run self-signed pairs) and waits for the banner.
   * `proxy`: a PROXY header written before the TLS handshake, as a load balancer writes it.
   */
  static async connectSecure(port: number, opts: { proxy?: string | Buffer } = {}): Promise<{ client: RawSmtp; banner: string }> {
    let socket;
    if (opts.proxy === undefined) socket = connectTls({ port, host: '127.0.0.1', rejectUnauthorized: false });
    else {
      const plain = connect(port, '127.0.0.1');
      plain.write(opts.proxy);
      socket = connectTls({ socket: plain, rejectUnauthorized: false });
    }
    await new Promise<void>((resolve, reject) => {
      socket.once('secureConnect', () => resolve());
      socket.once('error', reject);
    });
    const client = new RawSmtp(socket);
    return { client, banner: await client.reply() };
  }

  /** STARTTLS, then the same client over the TLS socket (the certificate is not checked); throws unless 220. */
  async startTls(): Promise<RawSmtp> {
    const answer = await this.command('STARTTLS');
    if (!answer.startsWith('220')) throw new Error(`STARTTLS answered ${answer}`);
    this.socket.removeAllListeners('data');
    const socket = connectTls({ socket: this.socket, rejectUnauthorized: false });
    await new Promise<void>((resolve, reject) => {
      socket.once('secureConnect', () => resolve());
      socket.once('error', reject);
    });
    return new RawSmtp(socket);
  }

  /** The next complete reply (`250-...` lines up to the `250 ...` one), or '' once the server has closed. */
  async reply(timeoutMs = 10_000): Promise<string> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const m = /^(?:\d{3}-[^\n]*\n)*\d{3}(?: [^\n]*)?\r?\n/.exec(this.buffer);
      if (m) {
        this.buffer = this.buffer.slice(m[0].length);
        return m[0].trimEnd();
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

  /** Sends one command line (CRLF added) and reads its reply. */
  async command(line: string): Promise<string> {
    this.write(`${line}\r\n`);
    return this.reply();
  }

  /** EHLO, MAIL FROM and each RCPT TO; the replies in order. */
  async envelope(from: string, to: string[], ehlo = 'client.example'): Promise<string[]> {
    const replies = [await this.command(`EHLO ${ehlo}`), await this.command(`MAIL FROM:<${from}>`)];
    for (const rcpt of to) replies.push(await this.command(`RCPT TO:<${rcpt}>`));
    return replies;
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
