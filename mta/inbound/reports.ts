/**
 * Delivery and complaint reports read out of a received message (docs/api/decisions.md section 3): RFC 3464 DSNs (and RFC 6533
 * global DSNs), the bare `X-Failed-Recipients` notices of Exim and Exchange, and RFC 5965 ARF complaints, so inbound
 * SMTP can record them as events of the recipient they name. Pure: bytes in, a plain value out, never a throw.
 *
 * A small MIME walker over the text instead of mailparser's simpleParser: a report is recognised by its machine-readable
 * part, and only that part and the headers of the returned message are decoded, so a bounce that carries back a large
 * original costs one scan, not a decode of every attachment.
 */

export interface DsnRecipient {
  /** The failed recipient address, lower-cased, from Final-Recipient (rfc822; addr), else Original-Recipient, else X-Failed-Recipients. */
  recipient: string;
  /** 'failed' | 'delayed' | 'delivered' | 'relayed' | 'expanded' (Action, lower-cased); for X-Failed-Recipients without a report: 'failed'. */
  action: string;
  /** The enhanced status code, e.g. '5.1.1' or '4.2.2' (from Status:, else extracted from Diagnostic-Code, else '5.0.0' for failed / '4.0.0' for delayed). */
  status: string;
  /** The Diagnostic-Code text without its type prefix ('smtp; '), unfolded, trimmed, at most 1000 chars; else a short fallback. */
  diagnostic: string;
}

export type InboundReport =
  | {
      kind: 'dsn';
      recipients: DsnRecipient[];
      /** Message-ID of the original message if the report includes its headers (text/rfc822-headers or message/rfc822 part). */
      originalMessageId: string | null;
      /** Return-Path / envelope sender of the original message if found in the included headers. */
      originalReturnPath: string | null;
    }
  | {
      kind: 'arf';
      feedbackType: string;
      /** Original-Rcpt-To of the feedback report (lower-cased), or the To of the included original message */
      recipient: string | null;
      originalMailFrom: string | null;
      originalMessageId: string | null;
      originalReturnPath: string | null;
    }
  | null;

/** Work bounds: past these nothing is looked at, so a hostile or enormous message costs at most a few linear scans. */
export const LIMITS = {
  bytes: 2 * 1024 * 1024,
  /**
   * Characters of one header section, or of a delivery-status or feedback-report body, read for fields: far more than
   * real headers, and 100 recipient blocks with 1000-character diagnostics fit several times over.
   */
  fieldText: 256 * 1024,
  recipients: 100,
  /** MIME parts visited, all levels together. */
  parts: 200,
  /** Multipart nesting followed; a report wrapped in multipart/mixed is two levels down. */
  depth: 8,
  diagnostic: 1000,
  /** Characters of a human-readable body searched for a status code (the notices put it near the top). */
  scannedText: 64 * 1024,
  /** Length of the body line quoted as the diagnostic of a notice without a machine-readable report. */
  excerpt: 300,
} as const;

// The tables below are Maps, not object literals: they are looked up with names taken from the message, and
// `{}['constructor']` would answer.

/** The machine-readable part that makes a message a report, whatever multipart holds it. */
export const REPORT_PARTS: ReadonlyMap<string, 'dsn' | 'arf'> = new Map([
  ['message/delivery-status', 'dsn'],
  ['message/global-delivery-status', 'dsn'], // RFC 6533
  ['message/feedback-report', 'arf'],
]);

/**
 * Parts that return the original message or its headers. Zoho labels them text/rfc822, some generators drop or add a
 * letter of the standard names, RFC 6532 messages come back as message/global(-headers).
 */
export const ORIGINAL_PARTS: ReadonlySet<string> = new Set([
  'message/rfc822',
  'text/rfc822-headers',
  'message/global',
  'message/global-headers',
  'text/rfc822',
  'text/rfc822-header',
  'message/rfc822-headers',
]);

/** What a recipient block without an Action field reports, by the class of its status code. */
export const ACTION_BY_STATUS_CLASS: ReadonlyMap<string, string> = new Map([
  ['2', 'delivered'],
  ['4', 'delayed'],
  ['5', 'failed'],
]);

/** The status of a recipient whose report carries no code at all, by action. An action we do not know is no evidence of a permanent failure: 4.0.0. */
export const STATUS_BY_ACTION: ReadonlyMap<string, string> = new Map([
  ['failed', '5.0.0'],
  ['delayed', '4.0.0'],
  ['delivered', '2.0.0'],
  ['relayed', '2.0.0'],
  ['expanded', '2.0.0'],
]);

/** The feedback type of a feedback-report part that names none (RFC 5965 requires it): the report exists because someone complained. */
const DEFAULT_FEEDBACK_TYPE = 'abuse';

/** Text of the diagnostic of an X-Failed-Recipients notice whose body shows no status code. */
const NO_CODE_NOTICE = 'X-Failed-Recipients';

/**
 * An RFC 3463 code inside free text, as in `550-5.1.1`, `(#4.4.2)` or `Status: 5.0.0 (permanent failure)`; the
 * characters around it keep an IP address such as 10.5.1.1 from reading as 5.1.1.
 */
const STATUS_IN_TEXT = /(?<![^\s(#:-])([245]\.\d{1,3}\.\d{1,3})(?![^\s);,:\]>])/;

/** Classifies and parses a whole received message (headers and body, CRLF or LF line ends). Never throws: anything it cannot parse is null. */
export function parseReport(raw: Buffer): InboundReport {
  try {
    return readReport(raw);
  } catch {
    // Not reachable by any input we know of; should one appear, the message is ordinary mail rather than a crash.
    return null;
  }
}

type Fields = Map<string, string>;
interface Entity {
  headers: Fields;
  body: string;
}
interface Leaf {
  type: string;
  entity: Entity;
}
interface Walk {
  /** Entities looked at, containers included, against LIMITS.parts. */
  visited: number;
  leaves: Leaf[];
  /** The report-type of every multipart/report met, lower-cased. */
  reportTypes: string[];
}

function readReport(raw: Buffer): InboundReport {
  // UTF-8 for the whole text: base64 and quoted-printable are ASCII either way, and RFC 6533 reports are UTF-8.
  const top = parseEntity(raw.subarray(0, LIMITS.bytes).toString('utf8').replace(/\r\n?/g, '\n'));
  const walk: Walk = { visited: 0, leaves: [], reportTypes: [] };
  collectLeaves(top, 0, walk);
  const at = walk.leaves.findIndex((leaf) => REPORT_PARTS.has(leaf.type));
  const report = walk.leaves[at];
  const original = originalHeaders(walk.leaves, at);
  const failed = failedRecipients(top.headers);

  if (report && REPORT_PARTS.get(report.type) === 'arf') return readFeedbackReport(decodeBody(report.entity), original);

  const perMessage: Fields = new Map();
  const recipients = report ? readDeliveryStatus(decodeBody(report.entity), failed, perMessage) : [];
  if (recipients.length === 0 && failed.length > 0) recipients.push(...noticeRecipients(failed, bodyText(walk.leaves)));
  // Yahoo and qmail send multipart/report with only a text part naming `<address>:` above the remote reply.
  if (recipients.length === 0 && walk.reportTypes.includes('delivery-status')) recipients.push(...textRecipients(bodyText(walk.leaves)));
  if (recipients.length === 0) return null;
  return {
    kind: 'dsn',
    recipients,
    // Gmail names the original in the per-message block even when it returns no headers; Postfix names the envelope sender there.
    originalMessageId: original?.get('message-id') ?? perMessage.get('x-original-message-id') ?? null,
    originalReturnPath: addressIn(original?.get('return-path')) ?? addressIn(perMessage.get('x-postfix-sender')),
  };
}

/** One recipient per block of a message/delivery-status body; the per-message fields are copied into `perMessage`. */
function readDeliveryStatus(text: string, failed: string[], perMessage: Fields): DsnRecipient[] {
  const groups: Fields[] = [];
  for (const block of text.slice(0, LIMITS.fieldText).split(/\n[ \t]*\n/)) {
    let group: Fields | undefined;
    for (const [name, value] of parseFields(block)) {
      // A generator that forgets the blank line between two recipients repeats their address fields instead.
      if (!group || ((name === 'final-recipient' || name === 'original-recipient') && group.has(name))) groups.push((group = new Map()));
      if (!group.has(name)) group.set(name, value);
    }
  }
  const recipients: DsnRecipient[] = [];
  let unnamed = 0;
  for (const group of groups) {
    const aboutRecipient = ['final-recipient', 'original-recipient', 'action', 'status'].some((name) => group.has(name));
    if (!aboutRecipient) {
      for (const [name, value] of group) if (!perMessage.has(name)) perMessage.set(name, value);
      continue;
    }
    if (recipients.length >= LIMITS.recipients) break;
    // A block that names no address takes the X-Failed-Recipients entry of the same position, as Exim lists them in order.
    const recipient = recipientIn(group.get('final-recipient')) ?? recipientIn(group.get('original-recipient')) ?? failed[unnamed++];
    const status = codeAtStart(group.get('status'));
    const diagnostic = group
      .get('diagnostic-code')
      ?.replace(/^[a-z][a-z0-9-]*[ \t]*;/i, '')
      .trim();
    const code = status ?? STATUS_IN_TEXT.exec(diagnostic ?? '')?.[1];
    const action = /^[a-z-]+/i.exec(group.get('action') ?? '')?.[0]?.toLowerCase() ?? ACTION_BY_STATUS_CLASS.get(code?.[0] ?? '');
    // With neither an Action nor a code the block says nothing about a delivery.
    if (!recipient || !action) continue;
    const statusComment = group
      .get('status')
      ?.replace(/^\s*[245]\.\d{1,3}\.\d{1,3}/, '')
      .trim()
      .replace(/^\(|\)$/g, '')
      .trim();
    recipients.push({
      recipient,
      action,
      status: code ?? STATUS_BY_ACTION.get(action) ?? '4.0.0',
      diagnostic: (diagnostic || statusComment || 'no Diagnostic-Code in the report').slice(0, LIMITS.diagnostic),
    });
  }
  return recipients;
}

/** An ARF report: its fields, and the identity of the original message when it comes back. */
function readFeedbackReport(text: string, original: Fields | undefined): InboundReport {
  const fields: Fields = new Map();
  for (const [name, value] of parseFields(text.replace(/\n[ \t]*\n/g, '\n'))) if (!fields.has(name)) fields.set(name, value);
  return {
    kind: 'arf',
    feedbackType: /^[a-z0-9-]+/i.exec(fields.get('feedback-type') ?? '')?.[0]?.toLowerCase() ?? DEFAULT_FEEDBACK_TYPE,
    // Hotmail's reports name the complaining mailbox only in X-HmXmrOriginalRecipient of the returned message.
    recipient: recipientIn(fields.get('original-rcpt-to')) ?? recipientIn(original?.get('x-hmxmroriginalrecipient')) ?? recipientIn(original?.get('to')),
    originalMailFrom: addressIn(fields.get('original-mail-from')),
    originalMessageId: original?.get('message-id') ?? null,
    originalReturnPath: addressIn(original?.get('return-path')),
  };
}

/**
 * The headers of the returned original: the first such part after the report part (any, when there is none), so that
 * a message forwarded next to a report in a multipart/mixed is not taken for the original.
 */
function originalHeaders(leaves: Leaf[], reportAt: number): Fields | undefined {
  const leaf = leaves.find((l, i) => i > reportAt && ORIGINAL_PARTS.has(l.type));
  if (!leaf) return undefined;
  const text = decodeBody(leaf.entity).replace(/^\n+/, '');
  const end = text.indexOf('\n\n');
  return firstValues(parseFields(end < 0 ? text : text.slice(0, end)));
}

/** X-Failed-Recipients notices: each listed address failed; the status is the first failure code the body shows. */
function noticeRecipients(failed: string[], body: string): DsnRecipient[] {
  const line = body.split('\n').find((l) => failureCode(l) !== undefined);
  const diagnostic = line ? line.trim().slice(0, LIMITS.excerpt) : NO_CODE_NOTICE;
  return failed.map((recipient) => ({ recipient, action: 'failed', status: (line && failureCode(line)) ?? '5.0.0', diagnostic }));
}

/** The first failure code (4.x.x or 5.x.x) in a notice's text; transcripts also quote the 2.x.x replies that went well. */
function failureCode(text: string): string | undefined {
  for (const m of text.matchAll(new RegExp(STATUS_IN_TEXT.source, 'g'))) if (!m[1]!.startsWith('2')) return m[1];
  return undefined;
}

/**
 * The qmail layout, which Yahoo keeps: `<address>:` alone on a line, then the remote reply until a blank line. qmail
 * writes it only when it gives up, so each is failed, even with a 4.x.x code (a message too long in the queue).
 */
function textRecipients(body: string): DsnRecipient[] {
  // The local part excludes '@' so that a long run of them cannot be split in every way.
  const ADDRESS_LINE = /^\s*<([^<>\s@]+@[^<>\s]+)>:\s*$/;
  const lines = body.split('\n');
  const recipients: DsnRecipient[] = [];
  for (let i = 0; i < lines.length && recipients.length < LIMITS.recipients; i++) {
    const m = ADDRESS_LINE.exec(lines[i]!);
    if (!m) continue;
    const reply: string[] = [];
    for (let j = i + 1; j < lines.length && j <= i + 10 && lines[j]!.trim() !== '' && !ADDRESS_LINE.test(lines[j]!); j++) reply.push(lines[j]!);
    const diagnostic = reply.map((l) => l.trim()).join(' ');
    recipients.push({
      recipient: m[1]!.toLowerCase(),
      action: 'failed',
      status: failureCode(diagnostic) ?? '5.0.0',
      diagnostic: (diagnostic || 'no reply quoted in the report').slice(0, LIMITS.diagnostic),
    });
  }
  return recipients;
}

/** The addresses of X-Failed-Recipients (comma or space separated, all such headers), lower-cased. */
function failedRecipients(headers: Fields): string[] {
  const list = (headers.get('x-failed-recipients') ?? '').split(/[\s,;]+/);
  return list
    .map((a) => a.replace(/^<|>$/g, '').toLowerCase())
    .filter((a) => a.includes('@'))
    .slice(0, LIMITS.recipients);
}

/** The human-readable text of the message: its first text/plain part, else its first HTML part without tags. */
function bodyText(leaves: Leaf[]): string {
  const plain = leaves.find((l) => l.type === 'text/plain');
  if (plain) return decodeBody(plain.entity, LIMITS.scannedText).slice(0, LIMITS.scannedText);
  const html = leaves.find((l) => l.type === 'text/html');
  return html
    ? decodeBody(html.entity, LIMITS.scannedText)
        .slice(0, LIMITS.scannedText)
        .replace(/<[^<>]*>/g, ' ')
    : '';
}

// --- Field values ---

/** A recipient address in a field value, lower-cased, or null when the value holds none. */
function recipientIn(value: string | undefined): string | null {
  const address = addressIn(value);
  return address?.includes('@') ? address.toLowerCase() : null;
}

/**
 * The address a field value holds, as written: after an address type (`rfc822;`, `utf-8;`), inside angle brackets if
 * any, the first word. `<>` and an empty value are null.
 */
function addressIn(value: string | undefined): string | null {
  if (value === undefined) return null;
  const typed = /^\s*([a-z0-9-]+)\s*;([^]*)$/i.exec(value);
  let address = typed ? typed[2]! : value;
  const angle = /<([^<>]*)>/.exec(address);
  if (angle) address = angle[1]!;
  address = address.trim().split(/[\s,]+/)[0] ?? '';
  // RFC 6533 writes non-ASCII characters of a utf-8 address as \x{HEX}.
  if (typed?.[1]?.toLowerCase() === 'utf-8')
    address = address.replace(/\\x\{([0-9a-f]{1,6})\}/gi, (all, hex: string) =>
      parseInt(hex, 16) <= 0x10ffff ? String.fromCodePoint(parseInt(hex, 16)) : all,
    );
  return address || null;
}

/** The code a Status field starts with; comments may follow it (`5.0.0 (permanent failure)`). */
function codeAtStart(value: string | undefined): string | undefined {
  return /^\s*([245]\.\d{1,3}\.\d{1,3})(?!\.?\d)/.exec(value ?? '')?.[1];
}

// --- MIME ---

/** Splits headers from body at the first blank line; text without one is all headers, a leading blank line means none. */
function parseEntity(text: string): Entity {
  if (text.startsWith('\n')) return { headers: new Map(), body: text.slice(1) };
  const end = text.indexOf('\n\n');
  return end < 0 ? { headers: firstValues(parseFields(text)), body: '' } : { headers: firstValues(parseFields(text.slice(0, end))), body: text.slice(end + 2) };
}

/** `Name: value` lines in order, names lower-cased, folded lines joined with a space; lines that are no field are skipped. */
function parseFields(text: string): [string, string][] {
  // Pieces are joined once at the end: appending to the value line by line is quadratic on a long folded field.
  const fields: [string, string[]][] = [];
  for (const line of text.slice(0, LIMITS.fieldText).split('\n')) {
    const last = fields[fields.length - 1];
    if (line.startsWith(' ') || line.startsWith('\t')) {
      if (last) last[1].push(line.trim());
      continue;
    }
    const colon = line.indexOf(':');
    const name = colon > 0 ? line.slice(0, colon).trim() : '';
    if (name && !/\s/.test(name)) fields.push([name.toLowerCase(), [line.slice(colon + 1).trim()]]);
  }
  return fields.map(([name, pieces]) => [name, pieces.filter(Boolean).join(' ')]);
}

/** The first (topmost) value of each field: for a Return-Path written twice, the one the final delivery added. */
function firstValues(fields: [string, string][]): Fields {
  const map: Fields = new Map();
  for (const [name, value] of fields) {
    if (!map.has(name)) map.set(name, value);
    // X-Failed-Recipients is a list: a repeated header adds to it rather than replacing it.
    else if (name === 'x-failed-recipients') map.set(name, `${map.get(name)}, ${value}`);
  }
  return map;
}

/** The content type and its parameters; values unquoted, names and the type lower-cased, text/plain when absent. */
function contentType(headers: Fields): { type: string; params: Map<string, string> } {
  const raw = (headers.get('content-type') ?? '').slice(0, 4096);
  const semicolon = raw.indexOf(';');
  const type = (semicolon < 0 ? raw : raw.slice(0, semicolon)).trim().toLowerCase();
  const params = new Map<string, string>();
  for (const m of raw.matchAll(/;\s*([^\s=;]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^;]*))/g)) {
    const value = m[2] !== undefined ? m[2].replace(/\\(.)/g, '$1') : m[3]!.trim().replace(/^"|"$/g, '');
    if (!params.has(m[1]!.toLowerCase())) params.set(m[1]!.toLowerCase(), value);
  }
  return { type: type.includes('/') ? type : 'text/plain', params };
}

/** Flattens the multipart tree into its leaf parts in order. A returned message (message/rfc822) is a leaf: a bounce it carries is not ours. */
function collectLeaves(entity: Entity, depth: number, walk: Walk): void {
  if (++walk.visited > LIMITS.parts) return;
  const { type, params } = contentType(entity.headers);
  if (!type.startsWith('multipart/')) {
    walk.leaves.push({ type, entity });
    return;
  }
  if (type === 'multipart/report') walk.reportTypes.push((params.get('report-type') ?? '').trim().toLowerCase());
  const boundary = params.get('boundary');
  // A multipart without a usable boundary has nothing we can read.
  if (!boundary || depth >= LIMITS.depth) return;
  for (const part of splitMultipart(entity.body, boundary)) collectLeaves(parseEntity(part), depth + 1, walk);
}

/** The parts between `--boundary` lines; the part after the last one counts when the closing `--boundary--` is missing. */
function splitMultipart(body: string, boundary: string): string[] {
  const text = `\n${body}`;
  const delimiter = `\n--${boundary}`;
  const parts: string[] = [];
  let start = -1;
  for (let at = text.indexOf(delimiter); at >= 0 && parts.length < LIMITS.parts; at = text.indexOf(delimiter, at + delimiter.length)) {
    const lineEnd = text.indexOf('\n', at + delimiter.length);
    const rest = text.slice(at + delimiter.length, lineEnd < 0 ? text.length : lineEnd);
    const closing = rest.startsWith('--');
    // Anything else after the boundary on the line makes it another boundary that starts with this one.
    if (!closing && !/^[ \t]*$/.test(rest)) continue;
    if (start >= 0) parts.push(text.slice(start, at));
    if (closing || lineEnd < 0) return parts;
    start = lineEnd + 1;
  }
  if (start >= 0 && parts.length < LIMITS.parts) parts.push(text.slice(start));
  return parts;
}

/** The body with its Content-Transfer-Encoding undone (base64, quoted-printable; anything else as is), LF line ends. */
function decodeBody(entity: Entity, maxChars = Infinity): string {
  const encoding = (entity.headers.get('content-transfer-encoding') ?? '').trim().toLowerCase();
  // Four base64 characters make three bytes; a little more input than needed is harmless.
  const body = Number.isFinite(maxChars) ? entity.body.slice(0, maxChars * 2) : entity.body;
  if (encoding === 'base64') return Buffer.from(body, 'base64').toString('utf8').replace(/\r\n?/g, '\n');
  if (encoding === 'quoted-printable') {
    const bytes = Buffer.from(body.replace(/=[ \t]*\n/g, ''), 'utf8').toString('latin1');
    return Buffer.from(
      bytes.replace(/=([0-9a-f]{2})/gi, (_all, hex: string) => String.fromCharCode(parseInt(hex, 16))),
      'latin1',
    )
      .toString('utf8')
      .replace(/\r\n?/g, '\n');
  }
  return body;
}
