import pg from 'pg';
import { PG_TEST_CA_FILE, startPostgres } from '../lib/postgres.js';
import { benchSendBody, createPoster, postAll, startBenchRig } from './rig.js';

/**
 * The customer-database writer against the delivery engine: N sends (~5 KB rendered) through POST /emails,
 * delivered to a local sink, with a local Postgres (TLS, verified) connected as the account's database. Prints the
 * rows/s reaching service.emails and service.events, the writer's lag behind the send (emails) and behind delivery
 * (events), p50/p99 and by quarter of the run (a lag that grows quarter on quarter means the writer falls behind),
 * and, in the same run, plain batched INSERTs of the same rows by a bare pg client, with the ratio.
 * Run: npm run bench:customer-db   (env BENCH_MESSAGES, BENCH_CONCURRENCY)
 */
const total = Number(process.env.BENCH_MESSAGES ?? 2000);
const concurrency = Number(process.env.BENCH_CONCURRENCY ?? 16);
const POLL_MS = 20;
const DB_HOST = 'db.pg.test';

const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0;
const sortNum = (xs: number[]) => [...xs].sort((a, b) => a - b);

interface Arrival {
  /** When the row was first seen in Postgres (polled every POLL_MS). */
  seenAt: number;
  /** When the service recorded what it carries: the send (emails) or the outcome (events). */
  at: number;
}

/** Polls the customer database for new rows of one table (ids are UUIDv7: new rows sort after the last seen). */
async function poll(
  client: pg.Client,
  table: 'emails' | 'events',
  column: 'created_at' | 'occurred_at',
  after: string,
): Promise<{ last: string; rows: Arrival[] }> {
  const res = await client.query<{ id: string; at: Date }>(`select id, ${column} as at from service.${table} where id > $1 order by id`, [after]);
  const now = Date.now();
  return { last: res.rows.at(-1)?.id ?? after, rows: res.rows.map((r) => ({ seenAt: now, at: r.at.getTime() })) };
}

function lagReport(name: string, arrivals: Arrival[], started: number): string[] {
  const lags = arrivals.map((a) => a.seenAt - a.at);
  const sorted = sortNum(lags);
  const last = Math.max(...arrivals.map((a) => a.seenAt));
  const quarter = Math.ceil(lags.length / 4);
  const quarters = [0, 1, 2, 3].map((q) => pct(sortNum(lags.slice(q * quarter, (q + 1) * quarter)), 50));
  return [
    `  service.${name.padEnd(7)} ${arrivals.length} rows, ${(arrivals.length / ((last - started) / 1000)).toFixed(0)} rows/s (first send to last row)`,
    `    lag p50 ${pct(sorted, 50)} ms, p99 ${pct(sorted, 99)} ms; p50 by quarter of the run ${quarters.map((q) => `${q} ms`).join(', ')}`,
  ];
}

/** The same rows inserted by a bare pg client in batches of 500 multi-row INSERTs, into a copy of the tables. */
async function bareInserts(client: pg.Client): Promise<{ rows: number; seconds: number }> {
  await client.query('drop schema if exists bench_bare cascade');
  await client.query('create schema bench_bare');
  await client.query('create table bench_bare.emails (like service.emails including all)');
  await client.query('create table bench_bare.events (like service.events including all)');
  const emails = (await client.query('select * from service.emails order by id')).rows;
  const events = (await client.query('select * from service.events order by id')).rows;
  const insertAll = async (table: string, rows: Record<string, unknown>[]) => {
    const columns = Object.keys(rows[0] ?? {});
    for (let i = 0; i < rows.length; i += 500) {
      const batch = rows.slice(i, i + 500);
      const params: unknown[] = [];
      const tuples = batch.map((row) => `(${columns.map((c) => `$${params.push(row[c])}`).join(', ')})`);
      await client.query(`insert into bench_bare.${table} (${columns.join(', ')}) values ${tuples.join(', ')}`, params);
    }
  };
  const t = performance.now();
  await client.query('begin');
  await insertAll('emails', emails);
  await insertAll('events', events);
  await client.query('commit');
  const seconds = (performance.now() - t) / 1000;
  await client.query('drop schema bench_bare cascade');
  return { rows: emails.length + events.length, seconds };
}

async function main(): Promise<void> {
  const postgres = await startPostgres({ certificate: 'trusted' });
  // The Postgres certificate is issued by the test CA: the connection is verified against it, as in production.
  const rig = await startBenchRig({ NODE_EXTRA_CA_CERTS: PG_TEST_CA_FILE });
  const sink = rig.sink;
  rig.dns.add(DB_HOST, { type: 'A', address: '127.0.0.1' });
  const { headers } = await rig.newSender('Bench', 'bench.example');
  const connected = await fetch(`${rig.base}/database`, { method: 'POST', headers, body: JSON.stringify({ url: postgres.url(DB_HOST) }) });
  if (connected.status !== 200) throw new Error(`POST /database answered ${connected.status}: ${await connected.text()}`);

  const reader = new pg.Client({
    host: '127.0.0.1',
    port: postgres.port,
    user: postgres.user,
    password: postgres.password,
    database: postgres.database,
    ssl: { rejectUnauthorized: false },
  });
  await reader.connect();

  const poster = createPoster(`${rig.base}/emails`, headers, concurrency);
  const post = poster.post;
  const body = benchSendBody;

  const emails: Arrival[] = [];
  const events: Arrival[] = [];
  let polling = true;
  const poller = (async () => {
    let lastEmail = '00000000-0000-0000-0000-000000000000';
    let lastEvent = lastEmail;
    while (polling) {
      const e = await poll(reader, 'emails', 'created_at', lastEmail);
      const v = await poll(reader, 'events', 'occurred_at', lastEvent);
      lastEmail = e.last;
      lastEvent = v.last;
      emails.push(...e.rows);
      events.push(...v.rows);
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
  })();

  const started = Date.now();
  const failed = await postAll(post, total, concurrency, body);

  const expected = total - failed;
  const deadline = Date.now() + 300_000;
  while ((emails.length < expected || events.length < expected) && Date.now() < deadline) await new Promise((r) => setTimeout(r, POLL_MS));
  polling = false;
  await poller;
  poster.close();
  const delivered = sink.delivered();
  const lastDelivery = Math.max(...sink.times());

  console.log(`${total} sends (${failed} refused), ${concurrency} concurrent API clients, sink and Postgres on loopback (Node ${process.version})`);
  console.log(
    `  delivered                ${delivered} messages, ${(delivered / ((lastDelivery - started) / 1000)).toFixed(0)} messages/s (first send to last delivery)`,
  );
  for (const line of [...lagReport('emails', emails, started), ...lagReport('events', events, started)]) console.log(line);
  const writerSeconds = (Math.max(...emails.map((a) => a.seenAt), ...events.map((a) => a.seenAt)) - started) / 1000;
  const writerRate = (emails.length + events.length) / writerSeconds;
  const bare = await bareInserts(reader);
  const bareRate = bare.rows / bare.seconds;
  console.log(`  writer, both tables      ${writerRate.toFixed(0)} rows/s, paced by the sends and deliveries`);
  console.log(
    `  bare pg batched INSERTs  ${bare.rows} rows in ${bare.seconds.toFixed(2)} s = ${bareRate.toFixed(0)} rows/s (ratio writer/bare ${(writerRate / bareRate).toFixed(2)})`,
  );

  await reader.end();
  await rig.close();
  await postgres.stop();
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
