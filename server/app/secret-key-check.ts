import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { eq, sql } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { customerDatabases, domainKeys, settings, webhookEndpoints } from '../../db/schema/index.js';
import type { Config } from '../shared/config.js';
import { SEAL_CONTEXTS } from '../shared/seal-contexts.js';
import { decryptSecret, encryptSecret } from '../shared/secrets.js';
import { one } from '../../db/sql.js';

/**
 * Whether the secret key this start was given is the one DATA_DIR's secrets were sealed with. A different key (a
 * SECRET_KEY set after the first start, beside the generated DATA_DIR/secret.key; a data directory moved without its
 * key) would open nothing: every send would fail to sign and wait days before it bounced, every webhook post and
 * customer-database write would fail. So the start stops instead, naming the variable. A value sealed with the key
 * is kept in `settings` to recognise it on later starts; data from before it existed is recognised by a sealed secret
 * of each kind, when there is one.
 */

const CHECK_SETTING = 'secret_key_check';
const CHECK_CONTEXT = 'secret-key-check';
const CHECK_PLAINTEXT = 'mailstead secret key';

export type SecretKeyCheck =
  | { kind: 'ok' }
  /** `what` names the stored secret the key could not open. */
  | { kind: 'mismatch'; what: string }
  /** SECRET_KEY=off: how many stored secrets it leaves unreadable. */
  | { kind: 'off'; sealed: { dkimKeys: number; webhookSecrets: number; databaseUrls: number } };

/** One stored secret of each kind, with the context it was sealed under. */
async function sampleSecrets(db: Db): Promise<{ what: string; sealed: string; context: string }[]> {
  const samples: { what: string; sealed: string; context: string }[] = [];
  const key = await one(
    db.select({ accountId: domainKeys.accountId, name: domainKeys.name, sealed: domainKeys.dkimPrivateKeySealed }).from(domainKeys).limit(1),
  );
  if (key) samples.push({ what: `the DKIM key of ${key.name}`, sealed: key.sealed, context: SEAL_CONTEXTS.dkimKey(key.accountId, key.name) });
  const hook = await one(db.select({ id: webhookEndpoints.id, sealed: webhookEndpoints.secretSealed }).from(webhookEndpoints).limit(1));
  if (hook) samples.push({ what: `the signing secret of webhook ${hook.id}`, sealed: hook.sealed, context: SEAL_CONTEXTS.webhookSecret(hook.id) });
  const database = await one(db.select({ accountId: customerDatabases.accountId, sealed: customerDatabases.urlSealed }).from(customerDatabases).limit(1));
  if (database)
    samples.push({
      what: `the database URL of account ${database.accountId}`,
      sealed: database.sealed,
      context: SEAL_CONTEXTS.customerDbUrl(database.accountId),
    });
  return samples;
}

const opens = (key: Buffer, sealed: string, context: string): boolean => {
  try {
    decryptSecret(key, sealed, context);
    return true;
  } catch {
    return false;
  }
};

const recordedCheck = async (db: Db) => await one(db.select({ value: settings.value }).from(settings).where(eq(settings.key, CHECK_SETTING)));

/** What `key` cannot open of DATA_DIR's secrets (the recorded check value, else a sample of each kind), or null. */
async function firstUnopened(db: Db, key: Buffer): Promise<string | null> {
  const recorded = await recordedCheck(db);
  if (recorded) return opens(key, recorded.value, CHECK_CONTEXT) ? null : 'the check value recorded at an earlier start';
  for (const s of await sampleSecrets(db)) if (!opens(key, s.sealed, s.context)) return s.what;
  return null;
}

/**
 * Whether DATA_DIR holds anything sealed with a key: then a missing DATA_DIR/secret.key is a lost key, not a first
 * start, and a new one generated in its place would open none of it.
 */
export async function holdsSealedSecrets(db: Db): Promise<boolean> {
  return (await recordedCheck(db)) !== undefined || (await sampleSecrets(db)).length > 0;
}

/** Checks `key` against DATA_DIR's secrets, and on a first start with a key (or the first since this check) records it. */
export async function checkSecretKey(db: Db, key: Buffer | null): Promise<SecretKeyCheck> {
  if (key === null) {
    const count = async (table: typeof domainKeys | typeof webhookEndpoints | typeof customerDatabases) =>
      (await one(db.select({ n: sql<number>`count(*)` }).from(table)))?.n ?? 0;
    return {
      kind: 'off',
      sealed: { dkimKeys: await count(domainKeys), webhookSecrets: await count(webhookEndpoints), databaseUrls: await count(customerDatabases) },
    };
  }
  const what = await firstUnopened(db, key);
  if (what !== null) return { kind: 'mismatch', what };
  await db
    .insert(settings)
    .values({ key: CHECK_SETTING, value: encryptSecret(key, CHECK_PLAINTEXT, CHECK_CONTEXT) })
    .onConflictDoNothing();
  return { kind: 'ok' };
}

/** The key in DATA_DIR/secret.key, when it holds one (read only: never generated here). */
function fileKey(dataDir: string): Buffer | null {
  try {
    const text = readFileSync(join(dataDir, 'secret.key'), 'utf8').trim();
    return /^[0-9a-f]{64}$/i.test(text) ? Buffer.from(text, 'hex') : null;
  } catch {
    return null;
  }
}

/** The start's one line on stderr for a mismatch: which key was used, and where the right one is when it is known. */
export async function mismatchLine(db: Db, config: Pick<Config, 'secretKey' | 'dataDir'>, what: string): Promise<string> {
  const file = join(config.dataDir, 'secret.key');
  const where = config.secretKey.mode === 'given' ? 'SECRET_KEY' : `SECRET_KEY (read from ${file})`;
  // Named only when it is the right key: a file left by some other start would send the operator the wrong way.
  const inFile = config.secretKey.mode === 'given' ? fileKey(config.dataDir) : null;
  const fileToo = inFile !== null && (await firstUnopened(db, inFile)) === null ? `; ${file} holds it (unset SECRET_KEY to use it)` : '';
  return `mailstead: invalid configuration: ${where} is not the key DATA_DIR's secrets were sealed with (it cannot open ${what}): start with that key${fileToo}`;
}

/** The start's warning for SECRET_KEY=off: what cannot work, and the stored secrets it leaves unreadable. */
export function keyOffWarning(sealed: { dkimKeys: number; webhookSecrets: number; databaseUrls: number }): string {
  const { dkimKeys, webhookSecrets, databaseUrls } = sealed;
  const stored =
    dkimKeys + webhookSecrets + databaseUrls > 0
      ? ` DATA_DIR holds secrets sealed with a key (${dkimKeys} DKIM keys, ${webhookSecrets} webhook secrets, ${databaseUrls} database URLs) that stay unreadable: mail from those domains is not sent and those webhooks and databases fail.`
      : '';
  return `SECRET_KEY=off: no domain can be connected (its DKIM key cannot be kept), so nothing can be sent; webhooks and customer databases cannot be configured; bounce (VERP) addresses are not signed.${stored}`;
}
