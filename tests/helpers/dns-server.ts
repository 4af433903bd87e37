// The DNS server the tests control lives in scripts/lib so the benchmarks can start one too.
export * from '../../scripts/lib/dns-server.js';
