import { describe, expect, it } from 'vitest';
import { cachingResolver } from '../server/shared/dns/cache.js';
import type { DnsResolver, Lookup } from '../server/shared/dns/resolver.js';

/** The inbound checks' DNS cache (server/shared/dns/cache.ts), over a resolver that counts the questions it is asked. */
function countingResolver(answers: Record<string, Lookup<unknown>>) {
  const asked: string[] = [];
  const answer = (type: string) => async (name: string) => {
    asked.push(`${type} ${name}`);
    return (answers[`${type} ${name.toLowerCase()}`] ?? { status: 'missing', nxdomain: true }) as never;
  };
  const inner: DnsResolver = { txt: answer('txt'), mx: answer('mx'), a: answer('a'), aaaa: answer('aaaa') };
  return { inner, asked };
}

const options = { maxAgeMs: 60_000, maxEntries: 3 };

describe('cachingResolver', () => {
  it('answers a repeated question from memory until the answer is too old, whatever the case of the name', async () => {
    let now = 0;
    const { inner, asked } = countingResolver({ 'txt sender.example': { status: 'found', records: [['v=spf1 -all']] } });
    const cached = cachingResolver(inner, () => now, options);
    expect(await cached.txt('sender.example')).toEqual({ status: 'found', records: [['v=spf1 -all']] });
    now += 59_999;
    expect(await cached.txt('SENDER.example')).toEqual({ status: 'found', records: [['v=spf1 -all']] });
    expect(asked).toEqual(['txt sender.example']);
    now += 2;
    await cached.txt('sender.example');
    expect(asked).toHaveLength(2);
  });

  it('keeps a found answer no longer than its TTL, and an absence for the maximum age', async () => {
    let now = 0;
    const { inner, asked } = countingResolver({ 'a mx.example': { status: 'found', records: ['192.0.2.1'], ttl: 5 } });
    const cached = cachingResolver(inner, () => now, options);
    await cached.a('mx.example');
    await cached.txt('_dmarc.nowhere.example');
    now += 5_001;
    await cached.a('mx.example');
    await cached.txt('_dmarc.nowhere.example');
    expect(asked).toEqual(['a mx.example', 'txt _dmarc.nowhere.example', 'a mx.example']);
  });

  it('never keeps a failure: the next question asks again', async () => {
    const { inner, asked } = countingResolver({ 'txt flaky.example': { status: 'unknown', reason: 'timeout' } });
    const cached = cachingResolver(inner, () => 0, options);
    expect((await cached.txt('flaky.example')).status).toBe('unknown');
    expect((await cached.txt('flaky.example')).status).toBe('unknown');
    expect(asked).toHaveLength(2);
  });

  it('shares one lookup among concurrent identical questions, and keeps each type apart', async () => {
    const { inner, asked } = countingResolver({});
    const cached = cachingResolver(inner, () => 0, options);
    await Promise.all([cached.txt('x.example'), cached.txt('x.example'), cached.a('x.example')]);
    expect(asked).toEqual(['txt x.example', 'a x.example']);
  });

  it('holds at most maxEntries answers, dropping the oldest', async () => {
    const { inner, asked } = countingResolver({});
    const cached = cachingResolver(inner, () => 0, options);
    for (const n of ['a', 'b', 'c', 'd']) await cached.txt(`${n}.example`);
    await cached.txt('d.example');
    await cached.txt('a.example');
    expect(asked).toEqual(['txt a.example', 'txt b.example', 'txt c.example', 'txt d.example', 'txt a.example']);
  });
});
