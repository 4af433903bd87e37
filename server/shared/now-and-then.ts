/**
 * A chore run now and then as part of other work (forgetting what is past its window): at the first call for a key (a
 * store), then at most once every `everyMs` per key. A clock stepped back (now before the last run) runs it at once,
 * since what it judges is judged on that same clock.
 */
export interface NowAndThen {
  /** Whether the chore is due for `key` at `now`; when it is, its next run is counted from now. */
  due(key: object, now: number): boolean;
  /** The chore left work behind (a full batch): it is due again at the next call, without waiting. */
  again(key: object): void;
}

export function nowAndThen(everyMs: number): NowAndThen {
  const last = new WeakMap<object, number>();
  return {
    due(key, now) {
      const at = last.get(key);
      if (at !== undefined && now - at < everyMs && now >= at) return false;
      last.set(key, now);
      return true;
    },
    again(key) {
      last.delete(key);
    },
  };
}
