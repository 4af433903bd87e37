import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Store } from '../db/client.js';
import { accounts, customerDatabases, domainKeys, settings, webhookEndpoints } from '../db/schema/index.js';
import { checkSecretKey, keyOffWarning } from '../server/app/secret-key-check.js';
import { encryptSecret } from '../server/shared/secrets.js';
import { openTestStore } from './helpers/test-state.js';

/**
 * The start's check of the secret key against DATA_DIR's secrets (server/app/secret-key-check.ts): a key is recorded on
 * the first start, and a later start with another key is a mismatch; data from before the record is judged by a
 * sealed secret of each kind; SECRET_KEY=off counts what it leaves unreadable. (The exit line: tests/config.test.ts.)
 * On the run's engine: DATA_DIR's SQLite file, or a state database of its own on a Postgres run.
 */

const A = Buffer.alloc(32, 1);
const B = Buffer.alloc(32, 2);
let dir: string;
let store: Store;

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'mailstead-key-check-'));
  store = await openTestStore(dir);
  await store.db.insert(accounts).values({ id: 'acc-1', name: 'Acme', dailyQuota: 1000, createdAt: 1 });
});
afterEach(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

const recorded = async () => (await store.db.select().from(settings)).filter((r) => r.key === 'secret_key_check');

describe('checkSecretKey', () => {
  it('first start: records the key; the same key again is ok, another is a mismatch', async () => {
    expect(await checkSecretKey(store.db, A)).toEqual({ kind: 'ok' });
    expect(await recorded()).toHaveLength(1);
    expect((await recorded())[0]!.value).not.toContain('mailstead');
    expect(await checkSecretKey(store.db, A)).toEqual({ kind: 'ok' });
    expect(await checkSecretKey(store.db, B)).toEqual({ kind: 'mismatch', what: 'the check value recorded at an earlier start' });
    expect(await recorded()).toHaveLength(1);
  });

  it.each([
    [
      'a DKIM key',
      async () =>
        await store.db.insert(domainKeys).values({
          id: 'k1',
          accountId: 'acc-1',
          name: 'shop.example',
          token: 't',
          selector: 's',
          dkimPublicKey: 'p',
          dkimPrivateKeySealed: encryptSecret(A, 'pem', 'dkim:acc-1:shop.example'),
          createdAt: 1,
        }),
      'the DKIM key of shop.example',
    ],
    [
      'a webhook secret',
      async () =>
        await store.db.insert(webhookEndpoints).values({
          id: 'w1',
          accountId: 'acc-1',
          url: 'https://h.example/',
          events: ['ping'],
          secretSealed: encryptSecret(A, 'whsec_x', 'webhook:w1'),
          active: true,
          failureCount: 0,
          disabledAt: null,
          lastPingAt: null,
          createdAt: 1,
        }),
      'the signing secret of webhook w1',
    ],
  ])('data from before the record, holding %s sealed with A: B is a mismatch naming it, A is ok and recorded', async (_, insert, what) => {
    await insert();
    expect(await checkSecretKey(store.db, B)).toEqual({ kind: 'mismatch', what });
    expect(await recorded()).toHaveLength(0);
    expect(await checkSecretKey(store.db, A)).toEqual({ kind: 'ok' });
    expect(await recorded()).toHaveLength(1);
    expect((await checkSecretKey(store.db, B)).kind).toBe('mismatch');
  });

  it('SECRET_KEY=off: counts the secrets it leaves unreadable, records nothing', async () => {
    await store.db.insert(webhookEndpoints).values({
      id: 'w1',
      accountId: 'acc-1',
      url: 'https://h.example/',
      events: ['ping'],
      secretSealed: encryptSecret(A, 'x', 'webhook:w1'),
      active: true,
      failureCount: 0,
      disabledAt: null,
      lastPingAt: null,
      createdAt: 1,
    });
    expect(await checkSecretKey(store.db, null)).toEqual({ kind: 'off', sealed: { dkimKeys: 0, webhookSecrets: 1, databaseUrls: 0 } });
    expect(await recorded()).toHaveLength(0);
    expect(await store.db.select().from(customerDatabases)).toHaveLength(0);
  });
});

describe('keyOffWarning', () => {
  it('says nothing can be sent, and counts the stored secrets left unreadable when there are any', () => {
    expect(keyOffWarning({ dkimKeys: 0, webhookSecrets: 0, databaseUrls: 0 })).toMatch(
      /^SECRET_KEY=off: no domain can be connected .* nothing can be sent; .*not signed\.$/,
    );
    expect(keyOffWarning({ dkimKeys: 2, webhookSecrets: 1, databaseUrls: 0 })).toContain(
      '(2 DKIM keys, 1 webhook secrets, 0 database URLs) that stay unreadable',
    );
  });
});
