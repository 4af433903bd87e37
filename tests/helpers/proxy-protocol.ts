import { isIP } from 'node:net';

/** What a load balancer writes before a connection it forwards (HAProxy's send-proxy and send-proxy-v2), for tests. */

const V2_SIGNATURE = Buffer.from([0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a]);

/** The 16 bytes of an IPv6 address (a dotted IPv4 tail allowed). */
function ipv6Bytes(ip: string): Buffer {
  let text = ip;
  const tail: number[] = [];
  const dotted = /^(.*:)(\d+\.\d+\.\d+\.\d+)$/.exec(ip);
  if (dotted) {
    tail.push(...dotted[2]!.split('.').map(Number));
    text = `${dotted[1]}0:0`;
  }
  const [head, rest] = text.includes('::') ? text.split('::') : [text, undefined];
  const left = head ? head.split(':') : [];
  const right = rest ? rest.split(':') : [];
  const groups = rest === undefined ? left : [...left, ...Array<string>(8 - left.length - right.length).fill('0'), ...right];
  const out = Buffer.alloc(16);
  groups.forEach((g, i) => {
    out.writeUInt16BE(parseInt(g || '0', 16), i * 2);
  });
  if (tail.length) Buffer.from(tail).copy(out, 12);
  return out;
}

const addressBytes = (ip: string) => (isIP(ip) === 4 ? Buffer.from(ip.split('.').map(Number)) : ipv6Bytes(ip));

/**
 * A version 2 header: PROXY (or LOCAL) with the addresses' family (AF_INET or AF_INET6 over TCP, from `source`;
 * `family` overrides the byte), then `tlvs` as given.
 */
export function proxyV2(opts: {
  command?: 'proxy' | 'local';
  family?: number;
  source?: string;
  sourcePort?: number;
  destination?: string;
  destinationPort?: number;
  tlvs?: Buffer;
}): Buffer {
  const addresses =
    opts.source === undefined ? Buffer.alloc(0) : Buffer.concat([addressBytes(opts.source), addressBytes(opts.destination ?? opts.source), Buffer.alloc(4)]);
  if (opts.source !== undefined) {
    addresses.writeUInt16BE(opts.sourcePort ?? 40000, addresses.length - 4);
    addresses.writeUInt16BE(opts.destinationPort ?? 25, addresses.length - 2);
  }
  const family = opts.family ?? (opts.source === undefined ? 0x00 : isIP(opts.source) === 4 ? 0x11 : 0x21);
  const body = Buffer.concat([addresses, opts.tlvs ?? Buffer.alloc(0)]);
  const head = Buffer.alloc(4);
  head[0] = opts.command === 'local' ? 0x20 : 0x21;
  head[1] = family;
  head.writeUInt16BE(body.length, 2);
  return Buffer.concat([V2_SIGNATURE, head, body]);
}

/** A version 1 line naming `source` as the client (TCP4 or TCP6 by its family). */
export function proxyV1(source: string, sourcePort = 40000, destination = isIP(source) === 4 ? '192.0.2.1' : '2001:db8::1', destinationPort = 25): string {
  return `PROXY TCP${isIP(source)} ${source} ${destination} ${sourcePort} ${destinationPort}\r\n`;
}
