import { randomBytes } from 'node:crypto';
import type { Clock } from '../server/shared/clock.js';

/**
 * The template editor's previews: an unsaved source's rendered HTML is shown in the same sandboxed frame as captured
 * mail, and a frame loads a URL, so the HTML is kept here for a while under an unguessable token, readable only by the
 * session that rendered it. In memory, bounded in count and time: a preview is a moment's view, never stored.
 */

export const PREVIEW_LIMITS = { entries: 200, ttlMs: 30 * 60_000 } as const;

export interface PreviewStore {
  /** Keeps `html` for `owner` (a session); returns its token. */
  put(owner: string, html: string): string;
  /** The HTML under `token`, if `owner` put it and it has not expired. */
  get(owner: string, token: string): string | undefined;
}

export function createPreviewStore(clock: Pick<Clock, 'monotonic'>, limits: { entries: number; ttlMs: number } = PREVIEW_LIMITS): PreviewStore {
  const kept = new Map<string, { owner: string; html: string; at: number }>();
  return {
    put(owner, html) {
      const now = clock.monotonic();
      for (const [token, entry] of kept) if (entry.at + limits.ttlMs <= now) kept.delete(token);
      while (kept.size >= limits.entries) kept.delete(kept.keys().next().value!);
      const token = randomBytes(18).toString('base64url');
      kept.set(token, { owner, html, at: now });
      return token;
    },
    get(owner, token) {
      const entry = kept.get(token);
      if (!entry || entry.owner !== owner || entry.at + limits.ttlMs <= clock.monotonic()) return undefined;
      return entry.html;
    },
  };
}
