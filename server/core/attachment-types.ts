/**
 * The attachment policy as tables (docs/api/attachments.md): the content type an extension stands for, and the
 * extensions mailbox providers refuse; and how a file name's extension is read.
 */

/**
 * The content type of an extension (lower case, no dot) when the request gives none. Anything else is
 * application/octet-stream.
 */
export const CONTENT_TYPES: Readonly<Record<string, string>> = {
  pdf: 'application/pdf',
  png: 'image/png',
  jpg: 'image/jpeg',
  jpeg: 'image/jpeg',
  gif: 'image/gif',
  webp: 'image/webp',
  avif: 'image/avif',
  heic: 'image/heic',
  bmp: 'image/bmp',
  tif: 'image/tiff',
  tiff: 'image/tiff',
  svg: 'image/svg+xml',
  ico: 'image/vnd.microsoft.icon',
  txt: 'text/plain',
  csv: 'text/csv',
  tsv: 'text/tab-separated-values',
  md: 'text/markdown',
  htm: 'text/html',
  html: 'text/html',
  ics: 'text/calendar',
  vcf: 'text/vcard',
  json: 'application/json',
  xml: 'application/xml',
  rtf: 'application/rtf',
  zip: 'application/zip',
  gz: 'application/gzip',
  tar: 'application/x-tar',
  '7z': 'application/x-7z-compressed',
  doc: 'application/msword',
  docx: 'application/vnd.openxmlformats-officedocument.wordprocessingml.document',
  xls: 'application/vnd.ms-excel',
  xlsx: 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet',
  ppt: 'application/vnd.ms-powerpoint',
  pptx: 'application/vnd.openxmlformats-officedocument.presentationml.presentation',
  odt: 'application/vnd.oasis.opendocument.text',
  ods: 'application/vnd.oasis.opendocument.spreadsheet',
  odp: 'application/vnd.oasis.opendocument.presentation',
  pkpass: 'application/vnd.apple.pkpass',
  mp3: 'audio/mpeg',
  wav: 'audio/wav',
  mp4: 'video/mp4',
};

export const DEFAULT_CONTENT_TYPE = 'application/octet-stream';

/**
 * Extensions refused, with who refuses them: Gmail bounces a message carrying any of its list
 * (support.google.com/mail/answer/6590), Outlook blocks its "Level 1" types (programs, scripts, shortcuts, installers,
 * disk images). A message that would bounce at the largest mailbox providers is refused at the API instead.
 */
export const REFUSED_EXTENSIONS: Readonly<Record<string, 'Gmail' | 'Outlook' | 'Gmail and Outlook'>> = {
  ade: 'Gmail and Outlook',
  adp: 'Gmail and Outlook',
  apk: 'Gmail',
  app: 'Outlook',
  application: 'Outlook',
  'appref-ms': 'Outlook',
  appx: 'Gmail',
  appxbundle: 'Gmail',
  bas: 'Outlook',
  bat: 'Gmail and Outlook',
  cab: 'Gmail and Outlook',
  chm: 'Gmail and Outlook',
  cmd: 'Gmail and Outlook',
  com: 'Gmail and Outlook',
  cpl: 'Gmail and Outlook',
  diagcab: 'Gmail and Outlook',
  diagcfg: 'Gmail',
  diagpkg: 'Gmail',
  dll: 'Gmail',
  dmg: 'Gmail',
  ex: 'Gmail',
  ex_: 'Gmail',
  exe: 'Gmail and Outlook',
  gadget: 'Outlook',
  hlp: 'Outlook',
  hta: 'Gmail and Outlook',
  img: 'Gmail',
  inf: 'Outlook',
  ins: 'Gmail and Outlook',
  iso: 'Gmail and Outlook',
  isp: 'Gmail and Outlook',
  jar: 'Gmail and Outlook',
  jnlp: 'Gmail and Outlook',
  js: 'Gmail and Outlook',
  jse: 'Gmail and Outlook',
  lib: 'Gmail',
  lnk: 'Gmail and Outlook',
  mde: 'Gmail and Outlook',
  mjs: 'Gmail',
  msc: 'Gmail and Outlook',
  msh: 'Outlook',
  msi: 'Gmail and Outlook',
  msix: 'Gmail',
  msixbundle: 'Gmail',
  msp: 'Gmail and Outlook',
  mst: 'Gmail and Outlook',
  msu: 'Outlook',
  nsh: 'Gmail',
  pif: 'Gmail and Outlook',
  ps1: 'Gmail and Outlook',
  ps1xml: 'Outlook',
  ps2: 'Outlook',
  ps2xml: 'Outlook',
  psc1: 'Outlook',
  psc2: 'Outlook',
  reg: 'Outlook',
  scf: 'Outlook',
  scr: 'Gmail and Outlook',
  sct: 'Gmail and Outlook',
  shb: 'Gmail and Outlook',
  shs: 'Outlook',
  sys: 'Gmail',
  url: 'Outlook',
  vb: 'Gmail and Outlook',
  vbe: 'Gmail and Outlook',
  vbs: 'Gmail and Outlook',
  vhd: 'Gmail and Outlook',
  vhdx: 'Outlook',
  vxd: 'Gmail',
  website: 'Outlook',
  ws: 'Outlook',
  wsb: 'Outlook',
  wsc: 'Gmail and Outlook',
  wsf: 'Gmail and Outlook',
  wsh: 'Gmail and Outlook',
  xbap: 'Outlook',
  xll: 'Gmail and Outlook',
};

/**
 * The extension a reader's system acts on: after the last dot, lower case, once trailing dots and spaces are dropped
 * (Windows drops them, so `invoice.exe.` and `invoice.exe ` open as `invoice.exe`). Null when there is none.
 */
export function extensionOf(filename: string): string | null {
  const name = filename.replace(/[. ]+$/, '');
  const dot = name.lastIndexOf('.');
  return dot < 0 ? null : name.slice(dot + 1).toLowerCase();
}

/** The content type of a file name from CONTENT_TYPES, else application/octet-stream. */
export function contentTypeFor(filename: string): string {
  const ext = extensionOf(filename);
  return (ext !== null && Object.hasOwn(CONTENT_TYPES, ext) && CONTENT_TYPES[ext]) || DEFAULT_CONTENT_TYPE;
}
