import { createSocket, type Socket } from 'node:dgram';
import { createServer, type Server } from 'node:net';
import dnsPacket, { type Answer, type Packet } from 'dns-packet';

const RCODE = { NOERROR: 0, SERVFAIL: 2, NXDOMAIN: 3 } as const;

export type ZoneRecord =
  | { type: 'TXT'; data: string | string[] }
  | { type: 'MX'; priority: number; exchange: string }
  | { type: 'A'; address: string }
  | { type: 'AAAA'; address: string };

/**
 * An authoritative DNS server on 127.0.0.1 (UDP and TCP on one port) whose zone the test edits: it answers TXT, MX,
 * A and AAAA, NXDOMAIN for unknown names, NOERROR/empty for a known name without the type, and can be told to
 * answer SERVFAIL for a name or never to answer at all (every query, or those for one name, or one type at a name).
 */
export class TestDnsServer {
  private zone = new Map<string, ZoneRecord[]>();
  private failing = new Set<string>();
  /** `name|type` (or `name|*` for every type) whose queries are read and dropped. */
  private silenced = new Set<string>();
  /** Names whose answers wait (hold): each held answer's send, run when the hold is released. */
  private held = new Map<string, { asked: () => void; waiting: (() => void)[] }>();
  /** When true, queries are read and dropped: the resolver sees silence. */
  silent = false;
  queries: { name: string; type: string }[] = [];
  port = 0;
  private udp?: Socket;
  private tcp?: Server;

  static async start(): Promise<TestDnsServer> {
    const server = new TestDnsServer();
    for (let attempt = 0; ; attempt++) {
      try {
        await server.listen();
        return server;
      } catch (err) {
        await server.stop();
        if (attempt >= 5) throw err;
      }
    }
  }

  /** For DNS_SERVERS. */
  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  private async listen(): Promise<void> {
    const udp = createSocket('udp4');
    this.udp = udp;
    udp.on('message', (msg, rinfo) => {
      this.respond(msg, (reply) => udp.send(reply, rinfo.port, rinfo.address));
    });
    await new Promise<void>((resolve, reject) => {
      udp.once('error', reject);
      udp.bind(0, '127.0.0.1', () => resolve());
    });
    this.port = udp.address().port;
    const tcp = createServer((socket) => {
      let buf = Buffer.alloc(0);
      socket.on('error', () => socket.destroy());
      socket.on('data', (chunk) => {
        buf = Buffer.concat([buf, chunk]);
        while (buf.length >= 2 && buf.length >= 2 + buf.readUInt16BE(0)) {
          const len = buf.readUInt16BE(0);
          const query = buf.subarray(2, 2 + len);
          buf = buf.subarray(2 + len);
          this.respond(query, (reply) => {
            const framed = Buffer.alloc(2 + reply.length);
            framed.writeUInt16BE(reply.length, 0);
            reply.copy(framed, 2);
            if (!socket.destroyed) socket.write(framed);
          });
        }
      });
    });
    this.tcp = tcp;
    await new Promise<void>((resolve, reject) => {
      tcp.once('error', reject);
      tcp.listen(this.port, '127.0.0.1', () => resolve());
    });
  }

  /** Sends the answer to `msg` (none when silenced), at once or, for a held name, once the hold is released. */
  private respond(msg: Buffer, send: (reply: Buffer) => void): void {
    const answered = this.answer(msg);
    if (!answered) return;
    const hold = this.held.get(answered.name);
    if (!hold) return send(answered.reply);
    hold.waiting.push(() => send(answered.reply));
    hold.asked();
  }

  private answer(msg: Buffer): { name: string; reply: Buffer } | null {
    let query: Packet;
    try {
      query = dnsPacket.decode(msg);
    } catch {
      return null;
    }
    const q = query.questions?.[0];
    if (!q) return null;
    const name = q.name.toLowerCase().replace(/\.$/, '');
    this.queries.push({ name, type: q.type });
    if (this.silent || this.silenced.has(`${name}|*`) || this.silenced.has(`${name}|${q.type}`)) return null;
    // dns-packet encodes the rcode only through the low four bits of `flags`.
    const reply = (rcode: number, answers: Answer[] = []) => ({ name, reply: encode(rcode, answers) });
    const encode = (rcode: number, answers: Answer[]) =>
      dnsPacket.encode({
        id: query.id,
        type: 'response',
        questions: query.questions,
        flags: dnsPacket.AUTHORITATIVE_ANSWER | dnsPacket.RECURSION_DESIRED | dnsPacket.RECURSION_AVAILABLE | rcode,
        answers,
      });
    if (this.failing.has(name)) return reply(RCODE.SERVFAIL);
    const records = this.zone.get(name);
    if (!records) return reply(RCODE.NXDOMAIN);
    const answers: Answer[] = [];
    for (const r of records) {
      if (r.type !== q.type) continue;
      // A copy: dns-packet turns the strings of the array it encodes into Buffers in place.
      if (r.type === 'TXT') answers.push({ type: 'TXT', name: q.name, ttl: 60, class: 'IN', data: Array.isArray(r.data) ? [...r.data] : [r.data] });
      if (r.type === 'MX') answers.push({ type: 'MX', name: q.name, ttl: 60, class: 'IN', data: { preference: r.priority, exchange: r.exchange } });
      if (r.type === 'A' || r.type === 'AAAA') answers.push({ type: r.type, name: q.name, ttl: 60, class: 'IN', data: r.address });
    }
    return reply(RCODE.NOERROR, answers);
  }

  /** Adds a record at `name`. */
  add(name: string, record: ZoneRecord): void {
    const key = name.toLowerCase().replace(/\.$/, '');
    this.zone.set(key, [...(this.zone.get(key) ?? []), record]);
  }

  /** Removes the records of `type` at `name` (all of them without a type); the name stays known if others remain. */
  drop(name: string, type?: ZoneRecord['type']): void {
    const key = name.toLowerCase().replace(/\.$/, '');
    const left = (this.zone.get(key) ?? []).filter((r) => type !== undefined && r.type !== type);
    if (left.length > 0) this.zone.set(key, left);
    else this.zone.delete(key);
  }

  /** Answers SERVFAIL for `name` until cleared. */
  fail(name: string, on = true): void {
    const key = name.toLowerCase().replace(/\.$/, '');
    if (on) this.failing.add(key);
    else this.failing.delete(key);
  }

  /** Never answers queries for `name` (only those of `type`, when given) until cleared: that lookup times out. */
  silence(name: string, type?: ZoneRecord['type'], on = true): void {
    const key = `${name.toLowerCase().replace(/\.$/, '')}|${type ?? '*'}`;
    if (on) this.silenced.add(key);
    else this.silenced.delete(key);
  }

  /**
   * Holds the answers to queries for `name` until `release()`: `asked` resolves once the first query for it came in,
   * so a test can act while a lookup is under way.
   */
  hold(name: string): { asked: Promise<void>; release(): void } {
    const key = name.toLowerCase().replace(/\.$/, '');
    let asked!: () => void;
    const arrived = new Promise<void>((resolve) => (asked = resolve));
    const hold = { asked, waiting: [] as (() => void)[] };
    this.held.set(key, hold);
    return {
      asked: arrived,
      release: () => {
        if (this.held.get(key) === hold) this.held.delete(key);
        for (const send of hold.waiting) send();
      },
    };
  }

  clear(): void {
    this.zone.clear();
    this.failing.clear();
    this.silenced.clear();
    for (const hold of this.held.values()) for (const send of hold.waiting) send();
    this.held.clear();
    this.silent = false;
    this.queries = [];
  }

  async stop(): Promise<void> {
    await Promise.all([
      new Promise<void>((resolve) => (this.udp ? this.udp.close(() => resolve()) : resolve())),
      new Promise<void>((resolve) => (this.tcp?.listening ? this.tcp.close(() => resolve()) : resolve())),
    ]);
  }
}
