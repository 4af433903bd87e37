/**
 * Types for the parts of mailauth 4 used beyond its top-level functions (mta/inbound/store.ts reads a header section
 * with its parser); mailauth ships types only for its top-level functions, these modules are plain CommonJS inside
 * the package.
 */
declare module 'mailauth/lib/tools.js' {
  export interface ParsedHeader {
    key: string | null;
    casedKey: string | undefined;
    line: Buffer;
  }
  export function parseHeaders(buf: Buffer): { parsed: ParsedHeader[]; original: Buffer };
}
