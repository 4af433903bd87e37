import { SMTPServer, type SMTPServerAddress, type SMTPServerSession } from 'smtp-server';

/** What the sink answers to one RCPT TO (or, with `data`, to the DATA of a transaction to that recipient). */
export type SinkAnswer = { code: number; message: string } | 'accept' | 'drop';

export interface Received {
  from: string;
  to: string[];
  raw: Buffer;
  secure: boolean;
  /** Wall-clock time the message was accepted. */
  at: number;
}

/**
 * An SMTP server on 127.0.0.1 built on smtp-server that answers what the test asks, per recipient: `rcpt(address,
 * attempt)` for RCPT TO and `data(address, attempt)` for the message; 'drop' closes the connection without a reply.
 */
export class SmtpSink {
  received: Received[] = [];
  attempts = new Map<string, number>();
  /** Keep the raw messages (tests) or only envelopes and times (benchmarks). */
  keepRaw = true;
  rcpt: (address: string, attempt: number) => SinkAnswer = () => 'accept';
  data: (recipients: string[]) => SinkAnswer = () => 'accept';
  port = 0;
  private server?: SMTPServer;

  static async start(): Promise<SmtpSink> {
    const sink = new SmtpSink();
    await sink.listen();
    return sink;
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

  private async listen(): Promise<void> {
    this.server = new SMTPServer({
      authOptional: true,
      disabledCommands: ['AUTH'],
      secure: false,
      hideSTARTTLS: true,
      logger: false,
      size: 30 * 1024 * 1024,
      onRcptTo: (address: SMTPServerAddress, session, done) => {
        const n = (this.attempts.get(address.address) ?? 0) + 1;
        this.attempts.set(address.address, n);
        this.reply(this.rcpt(address.address, n), session, done);
      },
      onData: (stream, session, done) => {
        const chunks: Buffer[] = [];
        stream.on('data', (c: Buffer) => {
          if (this.keepRaw) chunks.push(c);
        });
        stream.on('end', () => {
          const to = session.envelope.rcptTo.map((r) => r.address);
          const answer = this.data(to);
          if (answer === 'accept') {
            this.received.push({ from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '', to, raw: Buffer.concat(chunks), secure: session.secure, at: Date.now() });
          }
          this.reply(answer, session, done);
        });
      },
    });
    await new Promise<void>((resolve, reject) => {
      this.server!.once('error', reject);
      this.server!.listen(0, '127.0.0.1', () => resolve());
    });
    this.server.on('error', () => undefined);
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
