/**
 * A strict parser of the Prometheus text exposition format (version 0.0.4), as a scraper reads `/metrics`: it throws
 * on anything a scraper would refuse or that the format forbids, so a test that parses an answer also checks it.
 * Checked: metric and label names, label value escapes, numbers, one HELP and one TYPE per family before its samples,
 * a family's samples together and named after it (`_bucket`/`_sum`/`_count` of a histogram, and so on), no series
 * twice, and a histogram's buckets cumulative with `+Inf` equal to `_count`.
 */

export type MetricType = 'counter' | 'gauge' | 'histogram' | 'summary' | 'untyped';

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface MetricFamily {
  name: string;
  type: MetricType;
  help: string | null;
  samples: Sample[];
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const TYPES: readonly MetricType[] = ['counter', 'gauge', 'histogram', 'summary', 'untyped'];
const FLOAT = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;

function fail(lineNo: number, line: string, why: string): never {
  throw new Error(`prometheus text, line ${lineNo}: ${why}: ${JSON.stringify(line)}`);
}

function parseNumber(text: string): number | null {
  if (text === '+Inf' || text === 'Inf') return Infinity;
  if (text === '-Inf') return -Infinity;
  if (text === 'NaN') return NaN;
  return FLOAT.test(text) ? Number(text) : null;
}

/** HELP text escapes: `\\` and `\n` only. */
function unescapeHelp(text: string, lineNo: number, line: string): string {
  return text.replace(/\\(.?)/g, (_, c: string) => {
    if (c === '\\') return '\\';
    if (c === 'n') return '\n';
    fail(lineNo, line, `bad escape \\${c} in HELP`);
  });
}

/** `{a="1",b="x\"y"}` from position `start` (at the brace); returns the labels and the position after `}`. */
function parseLabels(line: string, start: number, lineNo: number): { labels: Record<string, string>; end: number } {
  const labels: Record<string, string> = {};
  let i = start + 1;
  for (;;) {
    if (line[i] === '}') return { labels, end: i + 1 };
    const eq = line.indexOf('=', i);
    if (eq < 0) fail(lineNo, line, 'label without =');
    const name = line.slice(i, eq);
    if (!LABEL_NAME.test(name)) fail(lineNo, line, `bad label name ${JSON.stringify(name)}`);
    if (name in labels) fail(lineNo, line, `label ${name} twice`);
    if (line[eq + 1] !== '"') fail(lineNo, line, 'label value not quoted');
    let value = '';
    let j = eq + 2;
    for (;;) {
      const c = line[j];
      if (c === undefined) fail(lineNo, line, 'unterminated label value');
      if (c === '"') break;
      if (c === '\\') {
        const e = line[j + 1];
        if (e === '\\' || e === '"') value += e;
        else if (e === 'n') value += '\n';
        else fail(lineNo, line, `bad escape \\${e ?? ''} in a label value`);
        j += 2;
        continue;
      }
      value += c;
      j++;
    }
    labels[name] = value;
    i = j + 1;
    if (line[i] === ',') i++;
    else if (line[i] !== '}') fail(lineNo, line, 'expected , or } after a label');
  }
}

/** The family a sample name belongs to, given the families declared so far. */
function familyOf(name: string, families: Map<string, MetricFamily>): MetricFamily | undefined {
  const own = families.get(name);
  if (own) return own;
  for (const suffix of ['_bucket', '_sum', '_count']) {
    if (!name.endsWith(suffix)) continue;
    const base = families.get(name.slice(0, -suffix.length));
    if (base && (base.type === 'histogram' || (base.type === 'summary' && suffix !== '_bucket'))) return base;
  }
  return undefined;
}

const seriesKey = (s: Sample) =>
  `${s.name}{${Object.keys(s.labels)
    .sort()
    .map((k) => `${k}=${JSON.stringify(s.labels[k])}`)
    .join(',')}}`;

function checkHistogram(family: MetricFamily): void {
  const groups = new Map<string, { buckets: [number, number][]; count?: number }>();
  for (const s of family.samples) {
    const { le, ...rest } = s.labels;
    const key = JSON.stringify(Object.entries(rest).sort());
    const group = groups.get(key) ?? { buckets: [] };
    groups.set(key, group);
    if (s.name.endsWith('_bucket')) {
      const bound = le === undefined ? null : parseNumber(le);
      if (bound === null) throw new Error(`prometheus text: ${family.name} bucket without a numeric le`);
      group.buckets.push([bound, s.value]);
    } else if (s.name.endsWith('_count')) group.count = s.value;
  }
  for (const [key, group] of groups) {
    const sorted = [...group.buckets].sort((a, b) => a[0] - b[0]);
    for (let i = 1; i < sorted.length; i++) {
      if (sorted[i]![1] < sorted[i - 1]![1]) throw new Error(`prometheus text: ${family.name}${key} buckets are not cumulative`);
    }
    const inf = sorted.at(-1);
    if (!inf || inf[0] !== Infinity) throw new Error(`prometheus text: ${family.name}${key} has no +Inf bucket`);
    if (group.count !== inf[1]) throw new Error(`prometheus text: ${family.name}${key} +Inf bucket ${inf[1]} is not _count ${group.count}`);
  }
}

export function parsePrometheusText(text: string): Map<string, MetricFamily> {
  if (text !== '' && !text.endsWith('\n')) throw new Error('prometheus text: the last line has no newline');
  const families = new Map<string, MetricFamily>();
  const declared = (name: string, lineNo: number, line: string): MetricFamily => {
    if (!METRIC_NAME.test(name)) fail(lineNo, line, `bad metric name ${JSON.stringify(name)}`);
    let family = families.get(name);
    if (!family) {
      family = { name, type: 'untyped', help: null, samples: [] };
      families.set(name, family);
    } else if (family.samples.length > 0) fail(lineNo, line, `HELP or TYPE of ${name} after its samples`);
    return family;
  };
  const typed = new Set<string>();
  const seen = new Set<string>();
  let current: MetricFamily | null = null;
  const closed = new Set<string>();

  text.split('\n').forEach((line, index) => {
    const lineNo = index + 1;
    if (line.trim() === '') return;
    if (line.startsWith('#')) {
      const m = /^#\s+(HELP|TYPE)\s+(\S+)(?:\s(.*))?$/.exec(line);
      if (!m) return; // another comment
      const family = declared(m[2]!, lineNo, line);
      if (m[1] === 'HELP') {
        if (family.help !== null) fail(lineNo, line, `second HELP for ${family.name}`);
        family.help = unescapeHelp(m[3] ?? '', lineNo, line);
      } else {
        if (typed.has(family.name)) fail(lineNo, line, `second TYPE for ${family.name}`);
        const type = (m[3] ?? '').trim() as MetricType;
        if (!TYPES.includes(type)) fail(lineNo, line, `unknown TYPE ${JSON.stringify(type)}`);
        family.type = type;
        typed.add(family.name);
      }
      return;
    }
    const nameEnd = line.search(/[{\s]/);
    if (nameEnd <= 0) fail(lineNo, line, 'a sample needs a name and a value');
    const name = line.slice(0, nameEnd);
    if (!METRIC_NAME.test(name)) fail(lineNo, line, `bad metric name ${JSON.stringify(name)}`);
    let labels: Record<string, string> = {};
    let rest = nameEnd;
    if (line[nameEnd] === '{') ({ labels, end: rest } = parseLabels(line, nameEnd, lineNo));
    const parts = line.slice(rest).trim().split(/\s+/);
    if (!/^[ \t]$/.test(line[rest] ?? '') || parts.length < 1 || parts.length > 2) fail(lineNo, line, 'expected " value [timestamp]"');
    const value = parseNumber(parts[0]!);
    if (value === null) fail(lineNo, line, `bad value ${JSON.stringify(parts[0])}`);
    if (parts[1] !== undefined && !/^-?\d+$/.test(parts[1])) fail(lineNo, line, `bad timestamp ${JSON.stringify(parts[1])}`);

    const family = familyOf(name, families) ?? declared(name, lineNo, line);
    if (family.type === 'histogram' && name === family.name) fail(lineNo, line, `histogram sample ${name} without _bucket, _sum or _count`);
    if (family.type === 'histogram' && name.endsWith('_bucket') && labels.le === undefined) fail(lineNo, line, 'a bucket without le');
    if (current !== family) {
      if (closed.has(family.name)) fail(lineNo, line, `samples of ${family.name} are not together`);
      if (current) closed.add(current.name);
      current = family;
    }
    const sample = { name, labels, value };
    const key = seriesKey(sample);
    if (seen.has(key)) fail(lineNo, line, `series ${key} twice`);
    seen.add(key);
    family.samples.push(sample);
  });
  for (const family of families.values()) if (family.type === 'histogram') checkHistogram(family);
  return families;
}

/** The value of the one series of `name` whose labels include `labels`; throws when there is none, or several. */
export function sampleValue(families: Map<string, MetricFamily>, name: string, labels: Record<string, string> = {}): number {
  const matches = [...families.values()]
    .flatMap((f) => f.samples)
    .filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  if (matches.length !== 1) throw new Error(`${matches.length} series ${name}${JSON.stringify(labels)}`);
  return matches[0]!.value;
}

/** Like sampleValue, 0 when the series does not exist yet (a labelled counter appears on its first increment). */
export function sampleValueOrZero(families: Map<string, MetricFamily>, name: string, labels: Record<string, string> = {}): number {
  const exists = [...families.values()].some((f) => f.samples.some((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v)));
  return exists ? sampleValue(families, name, labels) : 0;
}
