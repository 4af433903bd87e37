import { spawn } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { asc, count, eq, isNull } from 'drizzle-orm';
import { hasDatabase, openDatabase } from '../db/client.js';
import { createPrivateDir, PRIVATE_FILE_MODE } from '../db/data-dir.js';
import { accounts, outboundRecipients } from '../db/schema/index.js';
import { SIMULATOR_DOMAIN } from '../server/core/simulator.js';
import { systemClock } from '../server/shared/clock.js';
import { type Config, ConfigError, loadConfig } from '../server/shared/config.js';
import { STARTED_EVENT, type StartedMessage } from '../server/app/start-line.js';
import { createTopLevelAccount } from '../server/core/accounts.js';
import { adminTokenHash } from '../server/core/admin-token.js';
import { findLiveKey, insertKey } from '../server/core/keys.js';
import { SCOPES } from '../server/core/scopes.js';
import { randomBase62 } from '../server/shared/secrets.js';
import { one } from '../db/sql.js';

/**
 * `npm run dev`: the service in capture mode (nothing leaves the machine) on its own DATA_DIR (`./data-dev` unless
 * DATA_DIR is set; inbound SMTP on 2525 and submission on 2587 and 2465 unless SMTP_PORT, SUBMISSION_PORT or
 * SUBMISSIONS_PORT is set; every other variable as `npm start` reads it). On
 * a DATA_DIR without accounts it creates one with a key, keeps the key in DATA_DIR/dev-key (0600, like the secret key
 * beside it) so the next run prints it again, and prints it with commands to paste once the server listens.
 */

export const DEV_DATA_DIR = './data-dev';
export const DEV_SMTP_PORT = '2525';
/** SMTP submission of npm run dev: STARTTLS and implicit TLS, above 1024 so no privilege is needed. */
export const DEV_SUBMISSION_PORT = '2587';
export const DEV_SUBMISSIONS_PORT = '2465';
/** Where npm run dev listens unless HTTP_HOST or SMTP_HOST is set: this machine only. */
export const DEV_HOST = '127.0.0.1';
export const DEV_ACCOUNT_NAME = 'Dev';
/** The credits of the first account: a development server never runs into the trial's end. */
export const DEV_CREDITS = 100_000;
/** The domain the printed commands connect: under `.test`, so capture mode verifies it without DNS. */
export const DEV_DOMAIN = 'shop.test';
const KEY_FILE = 'dev-key';
/** The dashboard's admin token of npm run dev, kept like the key (0600) so each run prints the same one. */
const ADMIN_TOKEN_FILE = 'dev-admin-token';

/**
 * The environment the server runs with: capture mode, the dev DATA_DIR and SMTP port unless set, and loopback unless
 * HTTP_HOST or SMTP_HOST says otherwise: a dev server prints a key holding every scope and the dashboard's token, and
 * is reachable from this machine only.
 */
export function devEnvironment(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return {
    ...env,
    DELIVERY_MODE: 'capture',
    DATA_DIR: env.DATA_DIR || DEV_DATA_DIR,
    SMTP_PORT: env.SMTP_PORT || DEV_SMTP_PORT,
    SUBMISSION_PORT: env.SUBMISSION_PORT || DEV_SUBMISSION_PORT,
    SUBMISSIONS_PORT: env.SUBMISSIONS_PORT || DEV_SUBMISSIONS_PORT,
    HTTP_HOST: env.HTTP_HOST || DEV_HOST,
    SMTP_HOST: env.SMTP_HOST || DEV_HOST,
  };
}

export type DevAccount =
  | { kind: 'key'; accountId: string; key: string; created: boolean }
  /** The DATA_DIR has accounts of its own and no dev key: none is minted into it unasked. */
  | { kind: 'existing'; accountId: string };

/** The first account and its key: created on an empty DATA_DIR, read back from DATA_DIR/dev-key afterwards. */
export async function ensureDevAccount(config: Config): Promise<DevAccount> {
  createPrivateDir(config.dataDir);
  const store = openDatabase(config.dataDir);
  try {
    const deps = { db: store.db, clock: systemClock, config };
    const keyPath = join(config.dataDir, KEY_FILE);
    let saved: string | null = null;
    try {
      saved = readFileSync(keyPath, 'utf8').trim();
    } catch {
      // none yet
    }
    const live = saved ? await findLiveKey(store.db, saved) : undefined;
    if (saved && live) return { kind: 'key', accountId: live.account.id, key: saved, created: false };
    const first = await one(store.db.select().from(accounts).where(isNull(accounts.parentId)).orderBy(asc(accounts.id)));
    if (first) return { kind: 'existing', accountId: first.id };
    const account = await createTopLevelAccount(deps, { name: DEV_ACCOUNT_NAME, credits: DEV_CREDITS });
    const { key } = await insertKey(deps, { accountId: account.id, name: 'dev', scopes: SCOPES });
    writeFileSync(keyPath, `${key}\n`, { mode: PRIVATE_FILE_MODE });
    return { kind: 'key', accountId: account.id, key, created: true };
  } finally {
    store.close();
  }
}

/**
 * The dashboard's admin token: ADMIN_TOKEN when set, else the one in DATA_DIR/dev-admin-token (made on the first run).
 * The server gets it as ADMIN_TOKEN, so npm run dev can print it every time (npm start prints a generated one once).
 * Null for a DATA_DIR that already has a token of its own (an `npm start` data directory): that one is kept, never
 * replaced unasked.
 */
export async function devAdminToken(config: Config, env: NodeJS.ProcessEnv): Promise<string | null> {
  if (env.ADMIN_TOKEN) return env.ADMIN_TOKEN;
  createPrivateDir(config.dataDir);
  const path = join(config.dataDir, ADMIN_TOKEN_FILE);
  try {
    const saved = readFileSync(path, 'utf8').trim();
    if (saved.length >= 16) return saved;
  } catch {
    // none yet
  }
  if (hasDatabase(config.dataDir)) {
    const store = openDatabase(config.dataDir);
    try {
      if ((await adminTokenHash(store.db)) !== null) return null;
    } finally {
      store.close();
    }
  }
  const token = `msa_${randomBase62(40)}`;
  writeFileSync(path, `${token}\n`, { mode: PRIVATE_FILE_MODE });
  return token;
}

/**
 * Recipients a DATA_DIR that npm run dev did not make (no dev-key) still has queued for delivery: capture mode would
 * record them delivered without sending them, so npm run dev refuses such a directory.
 */
export async function queuedForDelivery(config: Config): Promise<number> {
  if (!hasDatabase(config.dataDir) || existsSync(join(config.dataDir, KEY_FILE))) return 0;
  const store = openDatabase(config.dataDir);
  try {
    return (await one(store.db.select({ n: count() }).from(outboundRecipients).where(eq(outboundRecipients.status, 'queued'))))?.n ?? 0;
  } finally {
    store.close();
  }
}

/** The API base a person on this machine uses: a wildcard listening address is reached as localhost. */
export function apiBase(host: string, port: number): string {
  const reach = host === '0.0.0.0' || host === '::' ? 'localhost' : isIP(host) === 6 ? `[${host}]` : host;
  return `http://${reach}:${port}/api/v1`;
}

/**
 * The printed commands' reader of an answer (node, which every machine running npm run dev has; no single quote, so
 * it sits in the shell's single quotes): the `id` of a JSON answer, or with a name the id of the item of `data` so
 * named (nothing when none is); anything else (an error of the API, no answer at all) goes to stderr as it came,
 * with a failing exit.
 */
export const ID_SCRIPT = [
  'const b=require("fs").readFileSync(0,"utf8"),n=process.argv[1];let j;try{j=JSON.parse(b)}catch{}',
  'const x=n&&j&&Array.isArray(j.data)?j.data.find((d)=>d.name===n)||{id:""}:j;',
  'if(x&&typeof x.id==="string"){if(x.id)console.log(x.id)}else{console.error(b.trim()||"(no answer)");process.exit(1)}',
].join('');

/**
 * The command that sends through SMTP submission with the dev key (swaks, as Debian packages it): STARTTLS on the
 * submission port, AUTH PLAIN with the key as the password. swaks does not check the self-signed certificate.
 */
export function swaksLine(host: string, port: number): string {
  const reach = host === '0.0.0.0' || host === '::' ? 'localhost' : isIP(host) === 6 ? `[${host}]` : host;
  return `swaks --server ${reach}:${port} --tls --auth PLAIN --auth-user dev --auth-password "$KEY" --from billing@${DEV_DOMAIN} --to customer@example.com --header "Subject: Hello over SMTP" --body "Sent through SMTP submission."`;
}

/** What is printed once the server listens: the key and the commands to paste. */
export function tryItText(config: Config, dev: DevAccount, api: string, adminToken: string | null, submissionPort: number | null = null): string {
  const head = [
    '',
    `Mailstead is running in capture mode: no mail leaves this machine. DATA_DIR is ${config.dataDir}.`,
    `Dashboard: ${api.replace(/\/api\/v1$/, '/dashboard')} (${adminToken ? `admin token ${adminToken}` : "this DATA_DIR's own admin token; DATA_DIR=<it> npm run -s cli -- admin-token reset prints a new one"}); captured mail is under Captured mail.`,
    `API reference: ${api.replace(/\/api\/v1$/, '/docs')} (every operation, with an example of each request and answer).`,
  ];
  if (dev.kind === 'existing') {
    return [
      ...head,
      `This DATA_DIR already has accounts, and no key of npm run dev: none was created. Mint one with`,
      `  DATA_DIR=${config.dataDir} npm run -s cli -- keys create --account ${dev.accountId} --name dev`,
      '',
    ].join('\n');
  }
  // Pasted twice (or after an earlier run connected shop.test), every line still works: the domain is looked up
  // before it is created, and a refusal of the API is printed as the API answered it, never read as an id.
  const send = JSON.stringify({
    from: `Shop <billing@${DEV_DOMAIN}>`,
    to: ['customer@example.com', `delivered@${SIMULATOR_DOMAIN}`, `bounce+RUN@${SIMULATOR_DOMAIN}`, `complaint+RUN@${SIMULATOR_DOMAIN}`],
    template: { name: 'receipt', receiptNumber: 'R-1042', paidOn: '2026-11-21', total: '$42.00' },
  }).replace(/\+RUN@/g, () => "+'$RUN'@");
  return [
    ...head,
    `${dev.created ? 'Created the account' : 'Account'} ${dev.accountId} (${DEV_ACCOUNT_NAME}) and its key (every scope${dev.created ? `, kept in ${join(config.dataDir, KEY_FILE)}` : ''}):`,
    '',
    `  ${dev.key}`,
    '',
    `Paste this into a shell (as often as you like): it connects ${DEV_DOMAIN} (or finds it, once connected) and verifies it, sends a`,
    'receipt to a customer (captured) and to the mailbox simulator (delivered, bounced, complained), then shows its',
    'events and the captured message. When the API refuses a step, its error is printed.',
    '',
    `KEY=${dev.key}`,
    `API=${api}`,
    'AUTH="Authorization: Bearer $KEY"',
    '# ms_id prints the id in an answer (with a name: the id of the listed item so named, or nothing); else the answer itself, as an error',
    `ms_id() { node -e '${ID_SCRIPT}' "$@"; }`,
    `DOMAIN_ID=$(curl -sS -H "$AUTH" "$API/domains?limit=100" | ms_id ${DEV_DOMAIN}) && [ -z "$DOMAIN_ID" ] && DOMAIN_ID=$(curl -sS -H "$AUTH" -d '{"name":"${DEV_DOMAIN}"}' $API/domains | ms_id)`,
    '[ -n "$DOMAIN_ID" ] && curl -sS -X POST -H "$AUTH" $API/domains/$DOMAIN_ID/verify; echo',
    "# bounce@ and complaint@ end up on the suppression list: a +label per run keeps each run's addresses apart",
    'RUN=$(date +%s)',
    `ID=$(curl -sS -H "$AUTH" $API/emails -d '${send}' | ms_id)`,
    '[ -n "$ID" ] && sleep 1 && curl -sS -H "$AUTH" $API/emails/$ID; echo',
    '[ -n "$ID" ] && curl -sS -H "$AUTH" "$API/emails/$ID/message?recipient=customer@example.com"',
    ...(submissionPort === null
      ? []
      : [
          '',
          '# The same from software that speaks only SMTP: submission with the key as the password (docs/sending/smtp.md)',
          swaksLine(config.smtpHost, submissionPort),
        ]),
    '',
  ].join('\n');
}

/** Runs the server (`node dist/server/app/main.js`) with the dev environment, printing the commands once it listens. */
async function main(): Promise<void> {
  if (process.env.DELIVERY_MODE && process.env.DELIVERY_MODE !== 'capture') {
    process.stderr.write(
      `mailstead dev: npm run dev always runs DELIVERY_MODE=capture (got "${process.env.DELIVERY_MODE}"); use npm start for direct delivery\n`,
    );
    process.exit(2);
  }
  const env = devEnvironment(process.env);
  let config: Config;
  try {
    config = loadConfig(env);
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`mailstead: ${err.message}\n`);
      process.exit(1);
    }
    throw err;
  }
  const queued = await queuedForDelivery(config);
  if (queued > 0) {
    process.stderr.write(
      `mailstead dev: ${config.dataDir} holds ${queued} ${queued === 1 ? 'recipient' : 'recipients'} queued for delivery; npm run dev runs DELIVERY_MODE=capture, which would record them delivered without sending them: use npm start on it, or another DATA_DIR\n`,
    );
    process.exit(2);
  }
  const dev = await ensureDevAccount(config);
  const adminToken = await devAdminToken(config, env);
  if (adminToken) env.ADMIN_TOKEN = adminToken;
  const serverMain = fileURLToPath(new URL('../server/app/main.js', import.meta.url));
  // The server's logs go straight to the terminal; it tells this process where it listens over IPC, whatever LOG_LEVEL.
  const child = spawn(process.execPath, [serverMain], { env, stdio: ['inherit', 'inherit', 'inherit', 'ipc'] });
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => child.kill(signal));
  child.on('message', (message: StartedMessage) => {
    if (message?.event === STARTED_EVENT)
      process.stdout.write(`${tryItText(config, dev, apiBase(config.httpHost, message.httpPort), adminToken, message.submissionPort ?? null)}\n`);
  });
  child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
}

if (import.meta.url === `file://${process.argv[1]}`) await main();
