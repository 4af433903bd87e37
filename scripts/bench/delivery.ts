import { generateKeyPairSync, sign } from 'node:crypto';
import { dkimSign } from 'mailauth/lib/dkim/sign.js';
import { prepareSigningKey } from '../../mta/dkim.js';
import { buildSignedMessage, signMessage } from '../../mta/message.js';
import { measureDelivery, startBenchRig } from './rig.js';

/**
 * End to end: N templated messages (~5 KB rendered) through POST /emails to a verified domain whose MX is a local
 * sink; messages/s from the first request to the last delivery, send-to-delivered latency, CPU seconds per 1000
 * messages and peak RSS of the service process; then one DKIM signature through the signing path against a bare
 * crypto.sign of the same data. Run: npm run bench:delivery   (env BENCH_MESSAGES, BENCH_CONCURRENCY; BENCH_ONLY=delivery
 * or BENCH_ONLY=signing runs one half)
 */
const total = Number(process.env.BENCH_MESSAGES ?? 2000);
const concurrency = Number(process.env.BENCH_CONCURRENCY ?? 16);

async function endToEnd(): Promise<void> {
  const rig = await startBenchRig();
  try {
    const { headers } = await rig.newSender('Bench', 'bench.example');
    const f = await measureDelivery(rig, headers, total, concurrency);
    console.log(`${total} messages (${f.refused} refused), ${concurrency} concurrent API clients, ${rig.sink.name} on loopback (Node ${process.version})`);
    console.log(`  accepted by the API in         ${f.acceptSeconds.toFixed(2)} s`);
    console.log(`  first request to last delivery ${f.seconds.toFixed(2)} s = ${f.rate.toFixed(0)} messages/s (${f.delivered} delivered)`);
    console.log(`  send-to-delivered latency      p50 ${f.p50} ms, p99 ${f.p99} ms`);
    console.log(
      `  service CPU                    ${f.cpuPer1000.toFixed(2)} s per 1000 messages (the benchmark's own process: API clients and sink polling, ${f.loadCpuPer1000.toFixed(2)} s)`,
    );
    console.log(`  service peak RSS               ${f.peakRssMb.toFixed(0)} MB`);
  } finally {
    await rig.close();
  }
}

async function signingCost(): Promise<void> {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const pem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  const signingKey = prepareSigningKey('bench.example', 'ms1', pem);
  const signTime = new Date();
  const raw = await buildSignedMessage(
    {
      id: '019a0000-0000-7000-8000-000000000000',
      accountId: 'a',
      domainKeyId: 'k',
      raw: null,
      fromHeader: '"Bench" <orders@bench.example>',
      attachments: null,
      fromAddress: 'orders@bench.example',
      replyToHeader: null,
      messageId: '<bench@mx.bench.test>',
      subject: 'Order shipped',
      html: `<p>${'Your order has shipped. '.repeat(100)}</p>`,
      text: 'Your order has shipped. '.repeat(100),
      createdAt: Date.now(),
      expiresAt: Date.now(),
    },
    ['customer@example.net'],
    signingKey,
    signTime,
  );
  // Interleaved rounds, so that a slow moment of the machine weighs on both sides alike; the median of each.
  const n = 100;
  const rounds = 7;
  const time = async (run: () => unknown): Promise<number> => {
    const t = performance.now();
    for (let i = 0; i < n; i++) await run();
    return ((performance.now() - t) / n) * 1000;
  };
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const viaPem = { signingDomain: 'bench.example', selector: 'ms1', privateKey: pem, algorithm: 'rsa-sha256', canonicalization: 'relaxed/relaxed', signTime };
  const ours: number[] = [];
  const bare: number[] = [];
  const ratios: number[] = [];
  for (let round = 0; round <= rounds; round++) {
    const o = await time(() => signMessage(raw, signingKey, signTime));
    const b = await time(() => sign('sha256', raw, signingKey.privateKey));
    // The first round warms both up and is not counted.
    if (round === 0) continue;
    ours.push(o);
    bare.push(b);
    ratios.push(o / b);
  }
  const mailauthPem = await time(async () => {
    const signed = await dkimSign(raw, { ...viaPem, signatureData: [viaPem] });
    if (!signed.signatures) throw new Error('mailauth made no signature');
  });
  console.log(`DKIM signature of a ${(raw.length / 1024).toFixed(1)} KB message (RSA-2048), median of ${rounds} interleaved rounds of ${n}:`);
  console.log(`  through the signing path (prepared key)      ${median(ours).toFixed(0)} µs`);
  console.log(`  bare crypto.sign of the same bytes           ${median(bare).toFixed(0)} µs   (ratio ${median(ratios).toFixed(2)}; target at most 1.3)`);
  console.log(`  mailauth dkimSign with the PEM, for contrast ${mailauthPem.toFixed(0)} µs`);
}

async function main(): Promise<void> {
  if (process.env.BENCH_ONLY !== 'signing') await endToEnd();
  if (process.env.BENCH_ONLY !== 'delivery') await signingCost();
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
