import type { DnsResolver, Lookup } from './resolver.js';

/**
 * A resolver that remembers answers for a short while: the inbound checks ask the same SPF and DMARC questions for
 * every message from a sender, and a burst of mail from one sender should cost one lookup, not thousands. Found
 * records are kept for their TTL, at most `maxAgeMs` (TXT answers carry no TTL here: `maxAgeMs`); definite absences
 * for `maxAgeMs`; failures and timeouts never, so the next message asks again. Concurrent identical questions share
 * one lookup. At most `maxEntries` answers are kept, the oldest dropped first.
 */
export interface DnsCacheOptions {
  maxAgeMs: number;
  maxEntries: number;
}

export function cachingResolver(inner: DnsResolver, now: () => number, options: DnsCacheOptions): DnsResolver {
  const entries = new Map<string, { answer: Promise<Lookup<unknown>>; expiresAt: number }>();

  function cached<T>(type: keyof DnsResolver, name: string): Promise<Lookup<T>> {
    const key = `${type} ${name.toLowerCase()}`;
    const hit = entries.get(key);
    if (hit && hit.expiresAt > now()) return hit.answer as Promise<Lookup<T>>;
    entries.delete(key);
    if (entries.size >= options.maxEntries) entries.delete(entries.keys().next().value!);
    // Until it settles the lookup is shared; then it is kept for as long as its answer may be.
    const entry = { answer: inner[type](name) as Promise<Lookup<unknown>>, expiresAt: Number.POSITIVE_INFINITY };
    entries.set(key, entry);
    entry.answer.then(
      (l) => {
        if (l.status === 'unknown') entries.delete(key);
        else entry.expiresAt = now() + Math.min(options.maxAgeMs, l.status === 'found' && l.ttl !== undefined ? l.ttl * 1000 : options.maxAgeMs);
      },
      () => entries.delete(key),
    );
    return entry.answer as Promise<Lookup<T>>;
  }

  return {
    txt: (name) => cached('txt', name),
    mx: (name) => cached('mx', name),
    a: (name) => cached('a', name),
    aaaa: (name) => cached('aaaa', name),
  };
}
