import { compile } from 'html-to-text';
import juice from 'juice';
import { type TopLevelToken, TokenKind, Tokenizer } from 'liquidjs';

/**
 * The html part of an account's own template (docs/api/templates.md): where in the HTML each Liquid output stands
 * (the URL rule), and what is done to the source once, when it is compiled: CSS inlined with juice and a text part
 * derived with html-to-text. Both run on the Liquid source, never per send: juice holds the event loop for seconds on a
 * large document (about 0.1 ms per element here), and every element of a rendered message is in its source (values
 * are always escaped, so a value never adds an element).
 */

/** Attributes whose value is a URL (HTML, SVG): only a `url` variable may start one, and a `url` variable goes nowhere else. */
export const URL_ATTRIBUTES: ReadonlySet<string> = new Set([
  'href',
  'src',
  'srcset',
  'action',
  'formaction',
  'background',
  'cite',
  'poster',
  'longdesc',
  'lowsrc',
  'dynsrc',
  'usemap',
  'codebase',
  'classid',
  'archive',
  'data',
  'manifest',
  'icon',
  'profile',
  'ping',
  'xlink:href',
]);

/** Where in the HTML a Liquid output stands. */
export type HtmlContext =
  | 'text'
  | 'comment'
  | 'attribute'
  | 'url-attribute-start'
  | 'url-attribute'
  | 'style-attribute'
  | 'event-attribute'
  | 'unquoted-attribute'
  | 'tag'
  | 'style'
  | 'script';

/** What may be output where, as data: a `url` variable, a `text` variable (or anything else: a local, a literal). */
export const OUTPUT_RULES: Record<HtmlContext, { url: boolean; text: boolean; where: string }> = {
  text: { url: false, text: true, where: 'in the text of an element' },
  comment: { url: false, text: true, where: 'in an HTML comment' },
  attribute: { url: false, text: true, where: 'in the value of a non-URL attribute' },
  'url-attribute-start': { url: true, text: false, where: 'at the start of the value of a URL attribute' },
  'url-attribute': { url: false, text: true, where: 'inside the value of a URL attribute, after its start' },
  'style-attribute': { url: false, text: true, where: 'in a style attribute' },
  'event-attribute': { url: false, text: false, where: 'in an event-handler attribute (on...), where HTML escaping does not make a value safe' },
  'unquoted-attribute': { url: false, text: false, where: 'in an unquoted attribute value (quote the value)' },
  tag: { url: false, text: false, where: 'inside an HTML tag, outside any attribute value' },
  style: { url: false, text: false, where: 'inside a <style> element (its CSS is inlined when the template is saved, before any value is known)' },
  script: { url: false, text: false, where: 'inside a <script> element, where HTML escaping does not make a value safe' },
};

/** Liquid tags that open a block, and the tag that closes each. */
const BLOCK_TAGS = new Set(['if', 'unless', 'case', 'for', 'tablerow', 'capture', 'comment', 'raw']);

export interface LiquidPiece {
  token: TopLevelToken;
  /** 'output' for `{{ }}`, 'tag' for `{% %}`, 'html' for the text between them. */
  kind: 'output' | 'tag' | 'html';
  /** The tag's name (tags only). */
  name: string;
  /** Whether the tag writes something (echo, cycle, liquid): its arguments are checked as an output's. */
  writes: boolean;
  /** The HTML context at the piece's start (outputs and tags only). */
  context: HtmlContext;
  /** The attribute the piece stands in, lower-cased ('' outside one). */
  attribute: string;
  /** Block depth of the piece (tags opened before it and not yet closed). */
  depth: number;
}

const RAW_TEXT = new Set(['script', 'style']);

/**
 * Walks the Liquid tokens of an html part through a small HTML state machine (enough for mail: tags, quoted and
 * unquoted attributes, comments, <script> and <style>), giving each output and tag the context it stands in.
 */
export function scanHtml(source: string): { pieces: LiquidPiece[]; ends: HtmlContext } {
  const tokens = new Tokenizer(source).readTopLevelTokens();
  let state: 'data' | 'tagName' | 'inTag' | 'attrName' | 'afterName' | 'beforeValue' | 'dq' | 'sq' | 'uq' | 'comment' | 'raw' | 'endTag' | 'decl' = 'data';
  let tagName = '';
  let attrName = '';
  let rawTag = '';
  let depth = 0;
  /** Whether literal text at depth <= the attribute's own has surely been written in the current attribute value. */
  let attrStarted = false;
  let attrDepth = 0;
  const pieces: LiquidPiece[] = [];

  const context = (): { context: HtmlContext; attribute: string } => {
    switch (state) {
      case 'data':
        return { context: 'text', attribute: '' };
      case 'comment':
        return { context: 'comment', attribute: '' };
      case 'raw':
        return { context: rawTag === 'style' ? 'style' : 'script', attribute: '' };
      case 'dq':
      case 'sq': {
        if (URL_ATTRIBUTES.has(attrName)) return { context: attrStarted ? 'url-attribute' : 'url-attribute-start', attribute: attrName };
        if (attrName.startsWith('on')) return { context: 'event-attribute', attribute: attrName };
        if (attrName === 'style') return { context: 'style-attribute', attribute: attrName };
        return { context: 'attribute', attribute: attrName };
      }
      case 'uq':
      case 'beforeValue':
        return { context: 'unquoted-attribute', attribute: attrName };
      default:
        return { context: 'tag', attribute: '' };
    }
  };

  for (const token of tokens) {
    if (token.kind === TokenKind.HTML) {
      const text = source.slice(token.begin, token.end);
      pieces.push({ token, kind: 'html', name: '', writes: false, context: 'text', attribute: '', depth });
      for (let i = 0; i < text.length; i++) {
        const c = text[i]!;
        switch (state) {
          case 'data':
            if (c === '<') {
              if (text.startsWith('<!--', i)) {
                state = 'comment';
                i += 3;
              } else if (text[i + 1] === '/') {
                state = 'endTag';
                i++;
              } else if (text[i + 1] === '!' || text[i + 1] === '?') state = 'decl';
              else if (/[A-Za-z]/.test(text[i + 1] ?? '')) {
                state = 'tagName';
                tagName = '';
              }
            }
            break;
          case 'tagName':
            if (/[\s/]/.test(c)) state = 'inTag';
            else if (c === '>') state = RAW_TEXT.has(tagName) ? ((rawTag = tagName), 'raw') : 'data';
            else tagName += c.toLowerCase();
            break;
          case 'inTag':
            if (c === '>') state = RAW_TEXT.has(tagName) ? ((rawTag = tagName), 'raw') : 'data';
            else if (!/[\s/]/.test(c)) {
              state = 'attrName';
              attrName = c.toLowerCase();
            }
            break;
          case 'attrName':
            if (c === '=') state = 'beforeValue';
            else if (c === '>') state = RAW_TEXT.has(tagName) ? ((rawTag = tagName), 'raw') : 'data';
            else if (/\s/.test(c)) state = 'afterName';
            else if (c === '/') state = 'inTag';
            else attrName += c.toLowerCase();
            break;
          case 'afterName':
            // `href = "..."`: spaces around the `=` are allowed.
            if (c === '=') state = 'beforeValue';
            else if (c === '>') state = RAW_TEXT.has(tagName) ? ((rawTag = tagName), 'raw') : 'data';
            else if (c === '/') state = 'inTag';
            else if (!/\s/.test(c)) {
              // A new attribute without a value before it.
              state = 'attrName';
              attrName = c.toLowerCase();
            }
            break;
          case 'beforeValue':
            if (c === '"' || c === "'") {
              state = c === '"' ? 'dq' : 'sq';
              attrStarted = false;
              attrDepth = depth;
            } else if (c === '>') state = 'data';
            else if (!/\s/.test(c)) state = 'uq';
            break;
          case 'dq':
          case 'sq':
            if (c === (state === 'dq' ? '"' : "'")) state = 'inTag';
            else if (!/\s/.test(c) && depth <= attrDepth) attrStarted = true;
            break;
          case 'uq':
            if (/\s/.test(c)) state = 'inTag';
            else if (c === '>') state = 'data';
            break;
          case 'comment':
            if (text.startsWith('-->', i)) {
              state = 'data';
              i += 2;
            }
            break;
          case 'raw':
            if (text.slice(i, i + 2 + rawTag.length).toLowerCase() === `</${rawTag}`) {
              state = 'endTag';
              i += 1 + rawTag.length;
            }
            break;
          case 'endTag':
          case 'decl':
            if (c === '>') state = 'data';
            break;
        }
      }
      continue;
    }
    const where = context();
    if (token.kind === TokenKind.Output) {
      pieces.push({ token, kind: 'output', name: '', writes: true, ...where, depth });
      continue;
    }
    const name = (token as unknown as { name: string }).name;
    if (name.startsWith('end') && BLOCK_TAGS.has(name.slice(3))) depth--;
    pieces.push({ token, kind: 'tag', name, writes: name === 'echo' || name === 'cycle' || name === 'liquid', ...where, depth });
    if (BLOCK_TAGS.has(name)) depth++;
  }
  return { pieces, ends: context().context };
}

/** The names a Liquid expression refers to (not properties after a dot, not filter names, not string literals). */
export function namesIn(expression: string): string[] {
  const bare = expression.replace(/"[^"]*"|'[^']*'/g, '""');
  const names: string[] = [];
  for (const m of bare.matchAll(/([.|]\s*)?([A-Za-z_][\w-]*)(\s*:)?/g)) {
    if (m[1] || m[3]) continue;
    if (['and', 'or', 'contains', 'in', 'reversed', 'limit', 'offset', 'cols', 'with', 'as', 'true', 'false', 'nil', 'null', 'empty', 'blank'].includes(m[2]!))
      continue;
    names.push(m[2]!);
  }
  return names;
}

/** The name an output starts with (`link` for `{{ link | append: "x" }}`), or null when it starts with something else. */
export function headName(expression: string): string | null {
  return /^\s*([A-Za-z_][\w-]*)\s*(\||$)/.exec(expression)?.[1] ?? null;
}

const MARK = 'mstlq';
const markOf = (i: number) => `${MARK}${i}x`;
const MARKS = /mstlq(\d+)x(="")?/g;

/** The source with each Liquid token replaced by an inert word, and the tokens to put back. */
function maskLiquid(source: string): { masked: string; tokens: string[] } {
  const tokens: string[] = [];
  let masked = '';
  for (const token of new Tokenizer(source).readTopLevelTokens()) {
    const text = source.slice(token.begin, token.end);
    if (token.kind === TokenKind.HTML) masked += text;
    else {
      masked += markOf(tokens.length);
      tokens.push(text);
    }
  }
  return { masked, tokens };
}

/** The indexes of the marks in `text`, in order. */
function marksIn(text: string): number[] {
  return [...text.matchAll(MARKS)].map((m) => Number(m[1]));
}

// juice swaps "code blocks" (<% %>, {{ }}, <# >) out and back with one regular expression per block found, a cost
// quadratic in the source; the Liquid here is masked by maskLiquid instead, so juice needs none.
for (const key of Object.keys(juice.codeBlocks)) delete juice.codeBlocks[key];

const JUICE_OPTIONS: juice.Options = {
  // Media queries, @font-face and :hover-like rules cannot be inlined: juice keeps them in a <style> element.
  preserveMediaQueries: true,
  preserveFontFaces: true,
  preservePseudos: true,
  // The inlined rules leave the document: a client that keeps <style> would apply them twice otherwise.
  removeStyleTags: true,
  applyWidthAttributes: true,
  applyHeightAttributes: true,
  applyAttributesTableElements: true,
};

/**
 * The html source with the CSS of its <style> elements inlined into the elements' style attributes, the Liquid
 * left as written; else the index of a Liquid token the inliner could not keep in place, or the count of elements
 * when there are more than juice handles in a bounded time.
 */
export function inlineCss(source: string, maxElements: number): { html: string } | { lost: number } | { elements: number } {
  if (!/<style[\s>]/i.test(source)) return { html: source };
  const elements = source.match(/<[A-Za-z]/g)?.length ?? 0;
  if (elements > maxElements) return { elements };
  const { masked, tokens } = maskLiquid(source);
  const out = juice(masked, JUICE_OPTIONS);
  const seen = marksIn(out);
  for (let i = 0; i < tokens.length; i++) if (seen[i] !== i) return { lost: seen[i] ?? i };
  return { html: out.replace(MARKS, (_m, i: string) => tokens[Number(i)]!) };
}

/** html-to-text's options: links as `text [url]`, images left out, headings as written (not upper-cased). */
export const HTML_TO_TEXT_OPTIONS = {
  wordwrap: 78,
  limits: { maxInputLength: 1024 * 1024 },
  selectors: [
    { selector: 'img', format: 'skip' },
    { selector: 'a', options: { hideLinkHrefIfSameAsText: true } },
    ...['h1', 'h2', 'h3', 'h4', 'h5', 'h6'].map((selector) => ({ selector, options: { uppercase: false } })),
    // Cells side by side, separated: html-to-text's default for a table that is not marked as data runs them together.
    { selector: 'table', format: 'dataTable', options: { uppercaseHeaderCells: false, maxColumnWidth: 78 } },
  ],
};

/** The converter, its options compiled once: `convert` compiles them again on every call (most of its cost on a small email). */
const toText = compile(HTML_TO_TEXT_OPTIONS);

/** Plain text from a rendered html part. */
export function htmlToText(html: string): string {
  return toText(html);
}

/**
 * A text part derived from the html source, as Liquid (rendered without HTML escaping): html-to-text run once on the
 * source with its Liquid masked, the Liquid put back. Null when html-to-text dropped or moved a Liquid tag (a loop
 * whose tags stand between table rows, say): the text is then made from each rendered html instead.
 */
export function textSourceFromHtml(source: string): string | null {
  const { masked, tokens } = maskLiquid(source);
  const text = htmlToText(masked);
  if (keepsEveryTag(text, tokens)) return joinTagLines(restoreLiquid(text, tokens));
  // html-to-text lays a table out as columns from its cells, and drops what stands between its rows: a `{% if %}`
  // around a row. Laid out a row a line, cells side by side, such a tag is kept on a line of its own, which is then
  // joined to the line after it (so a row left out leaves no blank line).
  const rows = toTextTablesAsRows(masked);
  if (!keepsEveryTag(rows, tokens)) return null;
  return joinTagLines(restoreLiquid(rows, tokens));
}

/** Every tag of the source exactly once, in order; an output may be left out (an image's src) but not repeated. */
function keepsEveryTag(text: string, tokens: readonly string[]): boolean {
  const isTag = tokens.map((t) => t.startsWith('{%'));
  const seen = marksIn(text);
  const tags = seen.filter((i) => isTag[i]);
  const wantTags = tokens.flatMap((_t, i) => (isTag[i] ? [i] : []));
  if (tags.length !== wantTags.length || tags.some((t, k) => t !== wantTags[k])) return false;
  return new Set(seen).size === seen.length;
}

/** The masked text with its Liquid put back; literal text is text, never Liquid. */
function restoreLiquid(text: string, tokens: readonly string[]): string {
  // A `{` html-to-text decoded from an entity is written as an output of "{".
  let inRaw = false;
  let out = '';
  let last = 0;
  for (const m of text.matchAll(MARKS)) {
    const literal = text.slice(last, m.index);
    out += inRaw ? literal : literal.replace(/\{/g, '{{ "{" }}');
    const token = tokens[Number(m[1])]!;
    if (/^\{%-?\s*raw\b/.test(token)) inRaw = true;
    if (/^\{%-?\s*endraw\b/.test(token)) inRaw = false;
    out += token;
    last = m.index + m[0].length;
  }
  out += text.slice(last).replace(/\{/g, '{{ "{" }}');
  return out;
}

/** A line holding only tags is joined to the next: it renders to nothing, and must not leave an empty line. */
function joinTagLines(text: string): string {
  return text.replace(/^[ \t]*((?:\{%[\s\S]*?%\}[ \t]*)+)\n/gm, '$1');
}

/** Tables a row a line, each cell followed by three spaces (trimmed at the line's end when the text is rendered). */
const toTextTablesAsRows = compile({
  ...HTML_TO_TEXT_OPTIONS,
  selectors: [
    ...HTML_TO_TEXT_OPTIONS.selectors.filter((s) => s.selector !== 'table'),
    { selector: 'table', format: 'block' },
    { selector: 'tr', format: 'block', options: { leadingLineBreaks: 1, trailingLineBreaks: 1 } },
    { selector: 'td', format: 'cell' },
    { selector: 'th', format: 'cell' },
  ],
  formatters: {
    cell: (elem, walk, builder) => {
      walk(elem.children, builder);
      builder.addLiteral('   ');
    },
  },
});
