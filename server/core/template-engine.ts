import { Liquid } from 'liquidjs';
import { MAX_RENDERED_BYTES, escapeHtml } from './templates.js';

/**
 * The two liquidjs engines of an account's own templates (docs/api/templates.md), set up for untrusted input: no file
 * system, strict filters, the parse, render-time and memory limits, and in html every output escaped.
 */

/** The engine's limits (docs/api/templates.md "Limits"): one account's template cannot hold the event loop or the memory. */
export const TEMPLATE_LIMITS = {
  /** Source of one template (subject, html and text as UTF-8), decisions.md section 9. */
  sourceBytes: 256 * 1024,
  /**
   * liquidjs `parseLimit`: characters parsed per part. A compiled html part is the template's and its layout's source
   * together with the CSS inlined into style attributes: four times the source limit.
   */
  parseLimit: 1024 * 1024,
  /** Elements of an html part (with its layout) whose CSS is inlined: juice takes ~0.15 ms per element here. */
  inlinedElements: 1_000,
  /** liquidjs `renderLimit`, ms, shared by the parts of one render: a send of a legitimate template takes well under 1 ms. */
  renderLimit: 100,
  /**
   * liquidjs `memoryLimit`, per part: characters and array items a render may create (strings built, ranges, split
   * results, html outputs escaped). Two million is twice the 1 MB a message may hold, and creating that many items
   * takes ~80 ms here.
   */
  memoryLimit: 2_000_000,
  /** Items of an array a filter may take: sorting or de-duplicating more holds the event loop too long. */
  filterArrayItems: 10_000,
  /** Blocks (if, for, case, capture...) nested in one another: the parser recurses, 10,000 would overflow its stack. */
  nesting: 50,
  /** Characters of html a text part is made from (html-to-text takes ~60 ms per 256 KB here). */
  textFromHtml: 256 * 1024,
  variables: 50,
} as const;

/** Filters left out: they read properties or evaluate expressions per item, which strings never need. */
const REMOVED_FILTERS = [
  'where',
  'where_exp',
  'reject',
  'reject_exp',
  'group_by',
  'group_by_exp',
  'find',
  'find_exp',
  'find_index',
  'find_index_exp',
  'has',
  'has_exp',
  'map',
];
/** Tags left out: no file system (include, render, layout, block). */
export const REMOVED_TAGS = ['include', 'render', 'layout', 'block'];

/** Markup a filter made from an escaped value (newline_to_br), written as it is. */
class SafeHtml {
  constructor(readonly html: string) {}
  toString(): string {
    return this.html;
  }
}

type FilterThis = { context: { renderLimit: { check(now: number): void }; memoryLimit: { use(n: number): void } } };

/**
 * Every output of html, escaped once. It is charged to the memory limit as liquidjs's own escape filter is, and an
 * output over the 1 MB a message may hold is refused before it is copied: escaping a string doubled by `capture` in
 * a loop would otherwise be one step of seconds.
 */
function escapeOutput(this: FilterThis, v: unknown): string {
  if (v instanceof SafeHtml) return v.html;
  const str = v === null || v === undefined ? '' : String(v);
  if (str.length > MAX_RENDERED_BYTES) throw new Error('an output is larger than the 1 MB a message may hold');
  this.context.memoryLimit.use(str.length);
  return escapeHtml(str);
}

function makeEngine(html: boolean): Liquid {
  const engine = new Liquid({
    strictFilters: true,
    strictVariables: false,
    ownPropertyOnly: true,
    // No file system: an empty in-memory one, and the tags that would read it removed below.
    templates: {},
    dynamicPartials: false,
    timezoneOffset: 0,
    locale: 'en-US',
    parseLimit: TEMPLATE_LIMITS.parseLimit,
    renderLimit: TEMPLATE_LIMITS.renderLimit,
    memoryLimit: TEMPLATE_LIMITS.memoryLimit,
    ...(html ? { outputEscape: escapeOutput } : {}),
  });
  for (const tag of REMOVED_TAGS) delete engine.tags[tag];
  for (const name of REMOVED_FILTERS) engine.unregisterFilter(name);
  if (html) {
    engine.unregisterFilter('raw');
    // Every output is escaped once at the end: escaping before would show `&amp;lt;`.
    for (const name of ['escape', 'escape_once', 'xml_escape', 'h']) engine.registerFilter(name, (v: unknown) => v);
    engine.registerFilter('newline_to_br', (v: unknown) => new SafeHtml(escapeHtml(String(v ?? '')).replace(/\r?\n/g, '<br />\n')));
  }
  // Each filter checks the time left and the size of an array it is given, so no single filter runs long.
  for (const [name, impl] of Object.entries(engine.filters)) {
    const handler = typeof impl === 'function' ? impl : impl.handler;
    if (!handler) continue;
    engine.registerFilter(name, function (this: FilterThis, ...args: unknown[]) {
      this.context.renderLimit.check(performance.now());
      for (const a of args) {
        if (Array.isArray(a) && a.length > TEMPLATE_LIMITS.filterArrayItems) {
          throw new Error(`the ${name} filter takes at most ${TEMPLATE_LIMITS.filterArrayItems} items`);
        }
      }
      return handler.apply(this as never, args as never);
    });
  }
  return engine;
}

export const htmlEngine = makeEngine(true);
export const textEngine = makeEngine(false);
