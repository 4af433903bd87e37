import { isIP } from 'node:net';

/**
 * The PROXY protocol header a load balancer (HAProxy's `send-proxy` or `send-proxy-v2`) writes before anything else on
 * a connection it forwards, naming the client it accepted: version 1 (one text line) and version 2 (binary), as
 * https://www.haproxy.org/download/3.0/doc/proxy-protocol.txt specifies them. A pure parser: bytes in, a verdict out.
 */

/** The longest version 1 line, CRLF included (the specification's own bound). */
export const MAX_V1_BYTES = 107;
/** Version 2: the fixed part (signature, version and command, family, length). */
export const V2_HEAD_BYTES = 16;
/**
 * Version 2: the most address and TLV bytes taken after the fixed part. The addresses need at most 216 (AF_UNIX);
 * the rest is TLVs (HAProxy's unique id, SSL details, a cloud's endpoint id), which are skipped.
 */
export const MAX_V2_BODY_BYTES = 2048;

const V1_PREFIX = Buffer.from('PROXY ', 'latin1');
const V2_SIGNATURE = Buffer.from([0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a]);

export interface ProxiedAddress {
  address: string;
  port: number;
}

/**
 * What the header says: the client and the address it connected to (`proxy`), or `local`: the connection is the
 * balancer's own (a v2 LOCAL health check, a v1 UNKNOWN, a v2 PROXY of an unspecified family), and the socket's own
 * peer stands.
 */
export type ProxyHeader = { kind: 'proxy'; version: 1 | 2; source: ProxiedAddress; destination: ProxiedAddress } | { kind: 'local'; version: 1 | 2 };

export type ProxyParse =
  /** What came so far may still become a header. */
  | { kind: 'needMore' }
  /** A header of `length` bytes: what follows it is the client's own (SMTP, or a TLS handshake). */
  | { kind: 'header'; header: ProxyHeader; length: number }
  /** Not a PROXY header: the connection is closed, naming the reason. */
  | { kind: 'error'; reason: string };

const needMore: ProxyParse = { kind: 'needMore' };
const error = (reason: string): ProxyParse => ({ kind: 'error', reason });

/** Reads the header at the start of `data` (everything received so far). */
export function parseProxyHeader(data: Buffer): ProxyParse {
  if (data.length === 0) return needMore;
  if (data[0] === V2_SIGNATURE[0]) return parseV2(data);
  if (data[0] === V1_PREFIX[0]) return parseV1(data);
  return error('no PROXY protocol header');
}

function parseV1(data: Buffer): ProxyParse {
  const prefix = Math.min(data.length, V1_PREFIX.length);
  if (!data.subarray(0, prefix).equals(V1_PREFIX.subarray(0, prefix))) return error('no PROXY protocol header');
  const lf = data.indexOf(0x0a);
  if (lf === -1) return data.length >= MAX_V1_BYTES ? error(`PROXY v1 line longer than ${MAX_V1_BYTES} bytes`) : needMore;
  if (lf + 1 > MAX_V1_BYTES) return error(`PROXY v1 line longer than ${MAX_V1_BYTES} bytes`);
  if (data[lf - 1] !== 0x0d) return error('PROXY v1 line not ended by CRLF');
  const line = data.subarray(0, lf - 1).toString('latin1');
  const length = lf + 1;
  const fields = line.split(' ');
  // "PROXY UNKNOWN" may carry anything after it, which the receiver ignores.
  if (fields[1] === 'UNKNOWN') return { kind: 'header', header: { kind: 'local', version: 1 }, length };
  if (fields.length !== 6) return error('malformed PROXY v1 line');
  const [, protocol, source, destination, sourcePort, destinationPort] = fields as [string, string, string, string, string, string];
  const family = protocol === 'TCP4' ? 4 : protocol === 'TCP6' ? 6 : 0;
  if (family === 0) return error(`PROXY v1 protocol "${protocol.slice(0, 16)}" is not TCP4, TCP6 or UNKNOWN`);
  if (isIP(source) !== family || isIP(destination) !== family) return error(`PROXY v1 addresses are not ${protocol} addresses`);
  const [from, to] = [v1Port(sourcePort), v1Port(destinationPort)];
  if (from === null || to === null) return error('PROXY v1 ports are not numbers from 0 to 65535');
  return {
    kind: 'header',
    header: { kind: 'proxy', version: 1, source: { address: source, port: from }, destination: { address: destination, port: to } },
    length,
  };
}

/** A port as version 1 writes it: decimal, no leading zero. */
function v1Port(text: string): number | null {
  if (!/^(0|[1-9]\d{0,4})$/.test(text)) return null;
  const n = Number(text);
  return n <= 65535 ? n : null;
}

/** Version 2's address families (the high nibble of byte 14) and the bytes of their address block. */
const V2_FAMILIES: Record<number, { name: 'unspec' | 'inet' | 'inet6' | 'unix'; bytes: number }> = {
  0: { name: 'unspec', bytes: 0 },
  1: { name: 'inet', bytes: 12 },
  2: { name: 'inet6', bytes: 36 },
  3: { name: 'unix', bytes: 216 },
};
const V2_STREAM = 0x1;
const V2_LOCAL = 0x0;
const V2_PROXY = 0x1;

function parseV2(data: Buffer): ProxyParse {
  const signature = Math.min(data.length, V2_SIGNATURE.length);
  if (!data.subarray(0, signature).equals(V2_SIGNATURE.subarray(0, signature))) return error('no PROXY protocol header (bad v2 signature)');
  if (data.length < V2_HEAD_BYTES) return needMore;
  const versionCommand = data[12]!;
  if (versionCommand >> 4 !== 2) return error(`PROXY v2 header of version ${versionCommand >> 4}`);
  const command = versionCommand & 0x0f;
  if (command !== V2_LOCAL && command !== V2_PROXY) return error(`PROXY v2 command ${command} is neither LOCAL nor PROXY`);
  const family = V2_FAMILIES[data[13]! >> 4];
  const transport = data[13]! & 0x0f;
  const bodyLength = data.readUInt16BE(14);
  if (bodyLength > MAX_V2_BODY_BYTES) return error(`PROXY v2 header of ${bodyLength} bytes after its fixed part, more than ${MAX_V2_BODY_BYTES}`);
  const length = V2_HEAD_BYTES + bodyLength;
  if (data.length < length) return needMore;
  // LOCAL: the balancer's own connection (a health check); its address block, if any, is discarded.
  if (command === V2_LOCAL) return { kind: 'header', header: { kind: 'local', version: 2 }, length };
  if (!family) return error(`PROXY v2 address family ${data[13]! >> 4} is unknown`);
  if (family.name === 'unspec') return { kind: 'header', header: { kind: 'local', version: 2 }, length };
  if ((family.name !== 'inet' && family.name !== 'inet6') || transport !== V2_STREAM) return error('PROXY v2 connection is not TCP over IPv4 or IPv6');
  if (bodyLength < family.bytes) return error(`PROXY v2 address block of ${bodyLength} bytes, ${family.bytes} needed`);
  const body = data.subarray(V2_HEAD_BYTES, length);
  const size = family.name === 'inet' ? 4 : 16;
  const address = family.name === 'inet' ? ipv4Text : ipv6Text;
  return {
    kind: 'header',
    header: {
      kind: 'proxy',
      version: 2,
      source: { address: address(body.subarray(0, size)), port: body.readUInt16BE(2 * size) },
      destination: { address: address(body.subarray(size, 2 * size)), port: body.readUInt16BE(2 * size + 2) },
    },
    length,
  };
}

function ipv4Text(b: Buffer): string {
  return `${b[0]}.${b[1]}.${b[2]}.${b[3]}`;
}

/** An IPv6 address in its usual short form (RFC 5952: lower case, the longest run of zero groups as `::`). */
function ipv6Text(b: Buffer): string {
  // An IPv4-mapped address keeps its dotted tail, as the socket itself would name such a peer.
  if (b.subarray(0, 10).every((x) => x === 0) && b[10] === 0xff && b[11] === 0xff) return `::ffff:${ipv4Text(b.subarray(12))}`;
  const groups = Array.from({ length: 8 }, (_, i) => b.readUInt16BE(i * 2));
  let best = { at: -1, length: 0 };
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > best.length && j - i > 1) best = { at: i, length: j - i };
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (best.at === -1) return hex.join(':');
  return `${hex.slice(0, best.at).join(':')}::${hex.slice(best.at + best.length).join(':')}`;
}
