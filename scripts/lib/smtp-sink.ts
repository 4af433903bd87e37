import { SMTPServer, type SMTPServerAddress, type SMTPServerSession } from 'smtp-server';

/** What the sink answers to one RCPT TO (or, with `data`, to the DATA of a transaction to that recipient). */
export type SinkAnswer = { code: number; message: string } | 'accept' | 'drop';

/** An answer now, or later (a slow or stalled server: a promise that never settles never answers). */
export type SinkReply = SinkAnswer | Promise<SinkAnswer>;

export interface SmtpSinkOptions {
  /** Connections served at once; smtp-server greets any connection beyond them with 421 and closes it. */
  maxClients?: number;
}

export interface Received {
  from: string;
  to: string[];
  raw: Buffer;
  secure: boolean;
  /** Wall-clock time the message was accepted. */
  at: number;
  /** The id of the SMTP session (connection) that carried it. */
  session: string;
}

/**
 * An SMTP server on 127.0.0.1 built on smtp-server that answers what the test asks, per recipient: `rcpt(address,
 * attempt)` for RCPT TO and `data(address, attempt)` for the message; 'drop' closes the connection without a reply.
 * Either may answer later through a promise. `connections`, `open` and `peakOpen` count TCP connections.
 */
export class SmtpSink {
  received: Received[] = [];
  attempts = new Map<string, number>();
  /** Keep the raw messages (tests) or only envelopes and times (benchmarks). */
  keepRaw = true;
  rcpt: (address: string, attempt: number) => SinkReply = () => 'accept';
  data: (recipients: string[]) => SinkReply = () => 'accept';
  /** TCP connections accepted since the start (or the last resetConnections), those open now, and the most at once. */
  connections = 0;
  open = 0;
  peakOpen = 0;
  port = 0;
  private server?: SMTPServer;
  /** Counts an open connection as closed, by the client's port. */
  private closing = new Map<number, () => void>();

  static async start(options: SmtpSinkOptions = {}): Promise<SmtpSink> {
    const sink = new SmtpSink();
    await sink.listen(options);
    return sink;
  }

  /** Restarts `connections` and `peakOpen` from the connections open now. */
  resetConnections(): void {
    this.connections = 0;
    this.peakOpen = this.open;
  }

  /** Runs `then` with the answer, at once when it is not a promise. */
  private answer(reply: SinkReply, then: (answer: SinkAnswer) => void, fail: (err: Error) => void): void {
    if (typeof reply === 'object' && 'then' in reply) reply.then(then, fail);
    else then(reply);
  }

  private reply(answer: SinkAnswer, session: SMTPServerSession, done: (err?: Error | null) => void): void {
    if (answer === 'accept') return done();
    if (answer === 'drop') {
      const socket = (session as unknown as { _socket?: { destroy(): void } })._socket;
      this.dropAll();
      return socket?.destroy();
    }
    const err = new Error(answer.message) as Error & { responseCode: number };
    err.responseCode = answer.code;
    done(err);
  }

  private dropAll(): void {
    for (const c of (this.server as unknown as { connections?: Set<{ _socket?: { destroy(): void } }> })?.connections ?? []) c._socket?.destroy();
  }

  private async listen(options: SmtpSinkOptions): Promise<void> {
    this.server = new SMTPServer({
      ...(options.maxClients !== undefined ? { maxClients: options.maxClients } : {}),
      authOptional: true,
      disabledCommands: ['AUTH'],
      secure: false,
      hideSTARTTLS: true,
      logger: false,
      size: 30 * 1024 * 1024,
      onClose: (session) => this.closing.get(session.remotePort)?.(),
      onRcptTo: (address: SMTPServerAddress, session, done) => {
        const n = (this.attempts.get(address.address) ?? 0) + 1;
        this.attempts.set(address.address, n);
        this.answer(this.rcpt(address.address, n), (answer) => this.reply(answer, session, done), done);
      },
      onData: (stream, session, done) => {
        const chunks: Buffer[] = [];
        stream.on('data', (c: Buffer) => {
          if (this.keepRaw) chunks.push(c);
        });
        stream.on('end', () => {
          const to = session.envelope.rcptTo.map((r) => r.address);
          this.answer(
            this.data(to),
            (answer) => {
              if (answer === 'accept') {
                this.received.push({
                  from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
                  to,
                  raw: Buffer.concat(chunks),
                  secure: session.secure,
                  at: Date.now(),
                  session: session.id,
                });
              }
              this.reply(answer, session, done);
            },
            done,
          );
        });
      },
    });
    await new Promise<void>((resolve, reject) => {
      this.server!.once('error', reject);
      this.server!.listen(0, '127.0.0.1', () => resolve());
    });
    this.server.on('error', () => undefined);
    this.server.server.on('connection', (socket) => {
      this.connections++;
      this.open++;
      this.peakOpen = Math.max(this.peakOpen, this.open);
      const port = socket.remotePort ?? 0;
      let closed = false;
      const close = () => {
        if (closed) return;
        closed = true;
        this.open--;
        if (this.closing.get(port) === close) this.closing.delete(port);
      };
      this.closing.set(port, close);
      // After STARTTLS the TLS socket owns the connection and the plain one may never close: the session's end counts too.
      socket.once('close', close);
      // The server ending its side (after its 221 to QUIT) ends the connection as far as SMTP goes: counted then, not
      // when the client's FIN is processed, which may come after the client's next connection is accepted.
      socket.once('finish', close);
    });
    const address = this.server.server.address();
    this.port = typeof address === 'object' && address ? address.port : 0;
  }

  /** Every recipient address a message arrived for, in arrival order. */
  deliveredTo(): string[] {
    return this.received.flatMap((r) => r.to);
  }

  async stop(): Promise<void> {
    await new Promise<void>((resolve) => this.server?.close(() => resolve()));
  }
}
