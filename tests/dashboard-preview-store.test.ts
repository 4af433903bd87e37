import { describe, expect, it } from 'vitest';
import { createPreviewStore } from '../dashboard/preview-store.js';

/** The template editor's previews kept for the sandboxed frame: per session, bounded in time and count. */

describe('the preview store', () => {
  it('gives a preview back to the session that made it only, until it expires', () => {
    let now = 1000;
    const store = createPreviewStore({ monotonic: () => now }, { entries: 3, ttlMs: 60_000 });
    const token = store.put('session-a', '<p>a</p>');
    expect(token).toMatch(/^[A-Za-z0-9_-]{24}$/);
    expect(store.get('session-a', token)).toBe('<p>a</p>');
    expect(store.get('session-b', token)).toBeUndefined();
    expect(store.get('session-a', 'not-a-token')).toBeUndefined();
    now += 59_999;
    expect(store.get('session-a', token)).toBe('<p>a</p>');
    now += 1;
    expect(store.get('session-a', token)).toBeUndefined();
  });

  it('keeps at most `entries` previews, dropping the oldest', () => {
    const store = createPreviewStore({ monotonic: () => 0 }, { entries: 2, ttlMs: 60_000 });
    const first = store.put('s', '1');
    const second = store.put('s', '2');
    const third = store.put('s', '3');
    expect([store.get('s', first), store.get('s', second), store.get('s', third)]).toEqual([undefined, '2', '3']);
  });
});
