import addressparser from 'nodemailer/lib/addressparser';

/**
 * What of a received message reaches mailauth (docs/api/decisions.md section 13; docs/api/behaviour.md, Inbound SMTP, "What reaches mailauth"). Anyone
 * on the internet can send a message to a receiving domain, and parts of mailauth cost more than the message's size:
 * its header parser is quadratic in the folded lines of a field and in the lines of the block (70,000 folded lines,
 * 280 KB, held a thread 39 s), and its DKIM verifier hashes the whole body once per distinct canonicalization,
 * algorithm and `l=` of the signatures (2,000 of them on 2 MB: a minute). The header block is scanned here first, in
 * one linear pass; a message past any of these limits is still stored, with DKIM and DMARC `temperror` (its
 * signatures were not checked) and SPF, which reads only the envelope, as usual.
 */
export const AUTH_LIMITS = {
  /** Bytes of the header block, up to and including the blank line that ends it. */
  headerBytes: 128 * 1024,
  /** Lines of the header block, folded lines included. */
  headerLines: 2000,
  /** Lines of one header field, its first line and its folded ones. */
  fieldLines: 500,
  /** DKIM-Signature fields. */
  dkimSignatures: 10,
  /** Distinct `l=` (body length) values among them; each is a hash of the body of its own. */
  bodyLengths: 3,
} as const;

export type HeaderScan =
  | {
      within: true;
      /** DKIM-Signature fields in the block. */
      dkimSignatures: number;
      /** The addresses of the From fields (for DMARC when nothing is signed). */
      from: string[];
    }
  | { within: false; reason: string };

/** The `l=` tag of a DKIM-Signature field's value, or null. */
function bodyLengthTag(value: string): string | null {
  const m = /(?:^|;)\s*l\s*=\s*([^;]*)/i.exec(value.replace(/\r\n[ \t]/g, ' '));
  return m ? m[1]!.replace(/\s+/g, '') : null;
}

/**
 * One linear pass over a header block (as read by store.ts headerBlock: at most `AUTH_LIMITS.headerBytes + 1` bytes,
 * so a longer one is seen as too long): whether mailauth may be given the message, and what the checks need from it.
 */
export function scanHeaderBlock(block: Buffer): HeaderScan {
  if (block.length > AUTH_LIMITS.headerBytes) return { within: false, reason: `header block over ${AUTH_LIMITS.headerBytes} bytes` };
  const lines = block
    .toString('latin1')
    .replace(/(\r?\n)+$/, '')
    .split(/\r?\n/);
  if (lines.length > AUTH_LIMITS.headerLines) return { within: false, reason: `header block over ${AUTH_LIMITS.headerLines} lines` };
  const fields: { name: string; value: string }[] = [];
  let fieldLines = 0;
  for (const line of lines) {
    if (/^[ \t]/.test(line) && fields.length > 0) {
      if (++fieldLines > AUTH_LIMITS.fieldLines) return { within: false, reason: `a header field over ${AUTH_LIMITS.fieldLines} lines` };
      fields[fields.length - 1]!.value += `\r\n${line}`;
      continue;
    }
    fieldLines = 1;
    const colon = line.indexOf(':');
    fields.push({ name: (colon >= 0 ? line.slice(0, colon) : line).trim().toLowerCase(), value: colon >= 0 ? line.slice(colon + 1) : '' });
  }
  const signatures = fields.filter((f) => f.name === 'dkim-signature');
  if (signatures.length > AUTH_LIMITS.dkimSignatures) return { within: false, reason: `over ${AUTH_LIMITS.dkimSignatures} DKIM signatures` };
  const lengths = new Set(signatures.map((f) => bodyLengthTag(f.value)).filter((l) => l !== null));
  if (lengths.size > AUTH_LIMITS.bodyLengths) return { within: false, reason: `over ${AUTH_LIMITS.bodyLengths} distinct DKIM body lengths (l=)` };
  const from = fields
    .filter((f) => f.name === 'from')
    .flatMap((f) =>
      addressparser(
        Buffer.from(f.value, 'latin1')
          .toString('utf8')
          .replace(/\r\n[ \t]/g, ' ')
          .trim(),
        { flatten: true },
      ).map((a) => a.address),
    )
    .filter(Boolean);
  return { within: true, dkimSignatures: signatures.length, from };
}
