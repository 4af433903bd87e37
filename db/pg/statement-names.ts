/**
 * Names for the statements the service repeats. Postgres parses, analyses and plans an unnamed statement on every
 * run; a named one once per connection, which keeps it for its life (and, after five runs, may keep its plan). On
 * this machine naming them took the state's `POST /emails` from about 110 to about 155 requests/s
 * (docs/performance.md).
 *
 * A text is named from its second run, so a statement run once (a migration, an operator's command) never is. At
 * most `limit` texts are named in all: the hot paths' statements are a fixed few, and a text that varies (a
 * multi-row insert's width, a list) must not fill every connection with statements it never runs again. Postgres
 * then holds at most `limit` statements a connection. The texts seen once are forgotten, all together, past `watch`
 * of them.
 */
export const STATEMENT_NAMES = { limit: 256, watch: 4096 } as const;

export type StatementNamer = (text: string) => string | undefined;

export function statementNamer(bounds: { limit: number; watch: number } = STATEMENT_NAMES): StatementNamer {
  const names = new Map<string, string>();
  const seenOnce = new Set<string>();
  return (text) => {
    const known = names.get(text);
    if (known !== undefined || names.size >= bounds.limit) return known;
    if (!seenOnce.has(text)) {
      if (seenOnce.size >= bounds.watch) seenOnce.clear();
      seenOnce.add(text);
      return undefined;
    }
    seenOnce.delete(text);
    const name = `mailstead_${names.size + 1}`;
    names.set(text, name);
    return name;
  };
}
