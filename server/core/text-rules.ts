import { z } from 'zod';

/**
 * What text that people read (a name, a reason) may hold, wherever it is shown: the dashboard, a refused send's
 * message, a log. Characters that are not text there, or that change how the text around them is drawn, are refused
 * at the door instead of escaped at every place that shows them.
 */

/** C0 controls, DEL and C1 controls (NEL among them). */
const CONTROL = '\\x00-\\x1f\\x7f-\\x9f';
/** The bidi embedding, override and isolate controls: they reorder what follows them, past the end of the value. */
const BIDI = '\\u202a-\\u202e\\u2066-\\u2069';
/** The Unicode line and paragraph separators. */
const SEPARATORS = '\\u2028\\u2029';

/** Not one character of these in a display name, a label or a reason. */
export const HIDDEN_CONTROLS = new RegExp(`[${CONTROL}${BIDI}]`);
const NOT_IN_A_LABEL = new RegExp(`[${CONTROL}${BIDI}${SEPARATORS}]`);
/** A reason may run over several lines (LF, CR, tab), never hold the rest. */
const NOT_IN_PROSE = new RegExp(`[\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f-\\x9f${BIDI}${SEPARATORS}]`);

/** A one-line label (an account's or a key's name). */
export const isLabel = (s: string): boolean => !NOT_IN_A_LABEL.test(s);
/** Free text (a suspension reason). */
export const isProse = (s: string): boolean => !NOT_IN_PROSE.test(s);

export const LABEL_MESSAGE = 'must not contain control characters, line breaks or bidi controls (U+202A to U+202E, U+2066 to U+2069)';
export const PROSE_MESSAGE = 'must not contain control characters other than line breaks and tabs, or bidi controls (U+202A to U+202E, U+2066 to U+2069)';

/** A label of `min` to `max` characters, trimmed. */
export const labelSchema = (min: number, max: number) => {
  const length = `must be ${min} to ${max} characters`;
  return z.string().trim().min(min, length).max(max, length).refine(isLabel, LABEL_MESSAGE);
};
