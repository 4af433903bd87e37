/**
 * Types for the parts of mailauth 4 that the DKIM signer composes (mta/dkim.ts). mailauth ships types only for its
 * top-level functions; these modules are plain CommonJS inside the package.
 */
declare module 'mailauth/lib/tools.js' {
  export interface ParsedHeader {
    key: string | null;
    casedKey: string | undefined;
    line: Buffer;
  }
  export interface SigningHeaderLines {
    keys: string;
    headers: ParsedHeader[];
  }
  export const defaultDKIMFieldNames: string;
  export function parseHeaders(buf: Buffer): { parsed: ParsedHeader[]; original: Buffer };
  export function getSigningHeaderLines(parsed: ParsedHeader[], fieldNames?: string | false, verify?: boolean): SigningHeaderLines;
  export function formatSignatureHeaderLine(type: 'DKIM', values: Record<string, string | number | undefined>, folded: boolean): string;
}

declare module 'mailauth/lib/dkim/body/index.js' {
  export interface BodyHasher {
    update(chunk: Buffer): void;
    digest(encoding: 'base64'): string;
  }
  export function dkimBody(canonicalization: 'relaxed' | 'simple', algorithm: 'sha256', maxBodyLength: false): BodyHasher;
}

declare module 'mailauth/lib/dkim/header/index.js' {
  import type { SigningHeaderLines } from 'mailauth/lib/tools.js';
  export function generateCanonicalizedHeader(
    type: 'DKIM',
    lines: SigningHeaderLines,
    options: { signingDomain: string; selector: string; algorithm: string; canonicalization: string; bodyHash: string; signTime: Date },
  ): { canonicalizedHeader: Buffer; dkimHeaderOpts: Record<string, string | number | undefined> };
}
