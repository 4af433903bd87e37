import { describe, expect, it } from 'vitest';
import { quantile } from './helpers/health-poller.js';

describe("quantile (the /healthz tests' p99)", () => {
  const hundred = Array.from({ length: 100 }, (_, i) => i + 1);

  it('is the nearest rank: the p99 of 100 answers is the 99th, so one outlier in 100 is within it and two are not', () => {
    expect(quantile(hundred, 0.99)).toBe(99);
    expect(quantile([...hundred.slice(0, 99), 149], 0.99)).toBe(99);
    expect(quantile([...hundred.slice(0, 98), 149, 150], 0.99)).toBe(149);
    expect(quantile(hundred, 0.5)).toBe(50);
    expect(quantile(hundred, 1)).toBe(100);
  });

  it('rounds the rank up when q of the count is not whole, and gives the only answer of one', () => {
    const many = Array.from({ length: 122 }, (_, i) => i + 1);
    expect(quantile(many, 0.99)).toBe(121);
    expect(quantile(many, 0.5)).toBe(61);
    expect(quantile([7], 0.99)).toBe(7);
    expect(quantile([7], 0)).toBe(7);
  });
});
