// The Postgres the tests start lives in scripts/lib so the benchmarks can start one too.
export * from '../../scripts/lib/postgres.js';
