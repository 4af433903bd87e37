// The SMTP sink lives in scripts/lib so the benchmarks can start one too.
export * from '../../scripts/lib/smtp-sink.js';
