import { and, desc, eq, inArray, isNull, lt, ne, sql } from 'drizzle-orm';
import { z } from 'zod';
import type { Db } from '../../db/client.js';
import { type DomainKeyRow, type DomainRow, type RecordKind, type RecordStatus, domainKeys, domains, outboundMessages } from '../../db/schema/index.js';
import { DAY_MS, iso } from '../shared/clock.js';
import type { Deps } from './deps.js';
import { ApiError, notFound } from '../shared/errors.js';
import { newId } from '../shared/ids.js';
import { assertAccountExists } from './accounts.js';
import type { PageRequest, RequestContext } from './context.js';
import { createDomainKeys } from './dkim-keys.js';
import {
  type Checks,
  type DomainFlags,
  RESERVED_NAME_CHECKS,
  checkMx,
  checkOwnership,
  checkSigning,
  checkSpf,
  deriveFlags,
  nextRecordStatus,
  verifiesWithoutDns,
} from './domain-checks.js';
import { normalizeDomainName } from './domain-name.js';
import { one } from '../../db/sql.js';

export const MAX_DOMAINS = 20;
/** An unverified claim keeps the name from other accounts until it is more than this old. */
export const CLAIM_HOLD_MS = 7 * DAY_MS;
/**
 * Keys (token, selector, DKIM pair) of deleted domains an account keeps for a reconnect. Beyond this, those released
 * longest ago are pruned, so create/delete cycles with new names cannot grow domain_keys without bound.
 */
export const KEPT_DOMAIN_KEYS = 20;

export const createDomainInput = z.strictObject({
  name: z.string().transform((v, ctx) => {
    const r = normalizeDomainName(v);
    if (!r.ok) {
      ctx.addIssue({ code: 'custom', message: r.reason });
      return z.NEVER;
    }
    return r.name;
  }),
});

export interface DnsRecordView {
  record: 'Ownership' | 'SPF' | 'Receiving' | 'Signing';
  type: 'TXT' | 'MX';
  name: string;
  value: string;
  status: RecordStatus;
}

export type DomainView = DomainFlags & {
  id: string;
  name: string;
  records: DnsRecordView[];
  createdAt: string;
  lastCheckedAt: string;
};

const PENDING: Record<RecordKind, RecordStatus> = { ownership: 'pending', spf: 'pending', receiving: 'pending', signing: 'pending' };

/** The Signing record's TXT value for a public key (base64 DER, as domain_keys keeps it): what the domain publishes. */
export function dkimRecordValue(publicKey: string): string {
  return `v=DKIM1; h=sha256; k=rsa; p=${publicKey}`;
}

/** The four records to publish (docs/api/decisions.md section 5), each with what the last verification found. */
export function domainRecords(deps: Pick<Deps, 'config'>, name: string, key: DomainKeyRow, status: Record<RecordKind, RecordStatus>): DnsRecordView[] {
  return [
    { record: 'Ownership', type: 'TXT', name: `_service-verify.${name}`, value: `service-verify=${key.token}`, status: status.ownership },
    { record: 'SPF', type: 'TXT', name, value: `v=spf1 include:${deps.config.spfDomain} ~all`, status: status.spf },
    { record: 'Receiving', type: 'MX', name, value: `10 ${deps.config.mailHostname}`, status: status.receiving },
    {
      record: 'Signing',
      type: 'TXT',
      name: `${key.selector}._domainkey.${name}`,
      value: dkimRecordValue(key.dkimPublicKey),
      status: status.signing,
    },
  ];
}

/** The Domain resource of docs/api/contract.md (the API's, the dashboard's). */
export function domainView(deps: Pick<Deps, 'config'>, row: DomainRow, key: DomainKeyRow): DomainView {
  return {
    id: row.id,
    name: row.name,
    ...deriveFlags(row.recordStatus, deps.config.smtpRelayUrl !== null),
    records: domainRecords(deps, row.name, key, row.recordStatus),
    createdAt: iso(row.createdAt),
    lastCheckedAt: iso(row.lastCheckedAt),
  };
}

async function findDomain(db: Db, accountId: string, id: string): Promise<{ domain: DomainRow; key: DomainKeyRow } | undefined> {
  return await one(
    db
      .select({ domain: domains, key: domainKeys })
      .from(domains)
      .innerJoin(domainKeys, eq(domainKeys.id, domains.keyId))
      .where(and(eq(domains.id, id), eq(domains.accountId, accountId))),
  );
}

async function requireDomain(deps: Pick<Deps, 'db'>, ctx: RequestContext, id: string) {
  const found = await findDomain(deps.db, ctx.account.id, id);
  if (!found) throw notFound('domain');
  return found;
}

/**
 * Refuses `name` while another account holds it: a verified claim always does, an unverified one for 7 days. An
 * account's claim dates from the first time it connected the name (its kept domain key), so deleting and reconnecting
 * does not restart the 7 days. Returns the expired claims of other accounts, for the caller to clear once the new
 * claim is certain to be made.
 */
async function claimName(db: Db, accountId: string, name: string, now: number): Promise<{ id: string; keyId: string; accountId: string }[]> {
  const others = await db
    .select({ id: domains.id, keyId: domains.keyId, accountId: domains.accountId, recordStatus: domains.recordStatus, claimedAt: domainKeys.createdAt })
    .from(domains)
    .innerJoin(domainKeys, eq(domainKeys.id, domains.keyId))
    .where(and(eq(domains.name, name), ne(domains.accountId, accountId)));
  const held = others.some((d) => deriveFlags(d.recordStatus, false).ownershipVerified || now - d.claimedAt <= CLAIM_HOLD_MS);
  // The message never says whether, or by whom, the name is held.
  if (held) throw new ApiError('domain_unavailable', `The domain ${name} cannot be connected to this account.`);
  return others.map((d) => ({ id: d.id, keyId: d.keyId, accountId: d.accountId }));
}

async function checkAccountRoom(db: Db, accountId: string, name: string): Promise<void> {
  const existing = await one(
    db
      .select({ id: domains.id })
      .from(domains)
      .where(and(eq(domains.accountId, accountId), eq(domains.name, name))),
  );
  if (existing) throw new ApiError('domain_exists', `The domain ${name} is already connected to this account.`);
  const count = (await one(db.select({ n: sql<number>`count(*)` }).from(domains).where(eq(domains.accountId, accountId))))?.n ?? 0;
  if (count >= MAX_DOMAINS) throw new ApiError('domain_limit', `This account already has ${MAX_DOMAINS} domains.`);
}

/** POST /domains. A name this account connected before gets its kept token, selector and key back. */
export async function createDomain({
  deps,
  ctx,
  input,
}: {
  deps: Pick<Deps, 'clock' | 'config' | 'db' | 'logger' | 'secretKey'>;
  ctx: RequestContext;
  input: z.output<typeof createDomainInput>;
}): Promise<DomainView> {
  const accountId = ctx.account.id;
  const { name } = input;
  await checkAccountRoom(deps.db, accountId, name);
  await claimName(deps.db, accountId, name, deps.clock.now());
  let key = await one(
    deps.db
      .select()
      .from(domainKeys)
      .where(and(eq(domainKeys.accountId, accountId), eq(domainKeys.name, name))),
  );
  let fresh: Awaited<ReturnType<typeof createDomainKeys>> | null = null;
  if (!key) {
    if (!deps.secretKey) throw new ApiError('not_configured', 'The server cannot store secrets (SECRET_KEY=off), so it cannot keep a DKIM key.');
    fresh = await createDomainKeys(deps.secretKey, accountId, name);
  }
  const now = deps.clock.now();
  // Key generation awaited: everything checked before it is checked again with the insert, in one transaction.
  const row = await deps.db.transaction(async (tx) => {
    await assertAccountExists(tx, accountId);
    await checkAccountRoom(tx, accountId, name);
    const expired = await claimName(tx, accountId, name, now);
    if (!key) {
      key = await one(
        tx
          .select()
          .from(domainKeys)
          .where(and(eq(domainKeys.accountId, accountId), eq(domainKeys.name, name))),
      );
    }
    if (!key && fresh) {
      key = await one(
        tx
          .insert(domainKeys)
          .values({
            id: newId(now),
            accountId,
            name,
            token: fresh.token,
            selector: fresh.selector,
            dkimPublicKey: fresh.publicKey,
            dkimPrivateKeySealed: fresh.privateKeySealed,
            createdAt: now,
          })
          .returning(),
      );
    }
    if (!key) throw new Error('domain key missing after creation');
    if (key.releasedAt !== null) key = (await one(tx.update(domainKeys).set({ releasedAt: null }).where(eq(domainKeys.id, key.id)).returning())) ?? key;
    // Only now, with every check passed, are other accounts' expired claims cleared: their keys are kept like a
    // deleted domain's, within the same bound.
    for (const claim of expired) {
      await tx.delete(domains).where(eq(domains.id, claim.id));
      await tx.update(domainKeys).set({ releasedAt: now }).where(eq(domainKeys.id, claim.keyId));
      await pruneKeptDomainKeys(tx, claim.accountId);
    }
    return (await one(
      tx
        .insert(domains)
        .values({ id: newId(now), accountId, name, keyId: key.id, recordStatus: PENDING, checks: null, createdAt: now, lastCheckedAt: now })
        .returning(),
    ))!;
  });
  deps.logger.info('domain.created', { domainId: row.id, accountId, name });
  return domainView(deps, row, key!);
}

export async function listDomains({ deps, ctx, page }: { deps: Pick<Deps, 'config' | 'db'>; ctx: RequestContext; page: PageRequest }): Promise<DomainView[]> {
  return (
    await deps.db
      .select({ domain: domains, key: domainKeys })
      .from(domains)
      .innerJoin(domainKeys, eq(domainKeys.id, domains.keyId))
      .where(and(eq(domains.accountId, ctx.account.id), page.after ? lt(domains.id, page.after) : undefined))
      .orderBy(desc(domains.id))
      .limit(page.limit + 1)
  ).map((r) => domainView(deps, r.domain, r.key));
}

export async function getDomain({ deps, ctx, id }: { deps: Pick<Deps, 'config' | 'db'>; ctx: RequestContext; id: string }): Promise<DomainView> {
  const { domain, key } = await requireDomain(deps, ctx, id);
  return domainView(deps, domain, key);
}

/**
 * Deletes the account's kept keys beyond the newest KEPT_DOMAIN_KEYS released ones. A key a domain uses, or that
 * queued mail still signs with (outbound_messages.domainKeyId, which would cascade), is never a candidate.
 * Returns the ids pruned.
 */
export async function pruneKeptDomainKeys(db: Db, accountId: string): Promise<string[]> {
  const kept = await db
    .select({ id: domainKeys.id })
    .from(domainKeys)
    .leftJoin(domains, eq(domains.keyId, domainKeys.id))
    .where(and(eq(domainKeys.accountId, accountId), isNull(domains.id)))
    .orderBy(desc(sql`coalesce(${domainKeys.releasedAt}, ${domainKeys.createdAt})`), desc(domainKeys.id));
  if (kept.length <= KEPT_DOMAIN_KEYS) return [];
  const queued = new Set(
    (
      await db
        .selectDistinct({ id: outboundMessages.domainKeyId })
        .from(outboundMessages)
        .where(
          inArray(
            outboundMessages.domainKeyId,
            kept.map((k) => k.id),
          ),
        )
    ).map((r) => r.id),
  );
  // Keys queued mail still needs count toward the bound but always stay: the others released longest ago make room.
  let room = KEPT_DOMAIN_KEYS - queued.size;
  const prune = kept.filter((k) => !queued.has(k.id) && room-- <= 0).map((k) => k.id);
  if (prune.length > 0) await db.delete(domainKeys).where(inArray(domainKeys.id, prune));
  return prune;
}

/**
 * DELETE /domains/{id}: the domain goes; its token, selector and key stay with the account for a reconnect, within
 * the KEPT_DOMAIN_KEYS bound.
 */
export async function deleteDomain({ deps, ctx, id }: { deps: Pick<Deps, 'clock' | 'db' | 'logger'>; ctx: RequestContext; id: string }): Promise<void> {
  const { domain } = await requireDomain(deps, ctx, id);
  const now = deps.clock.now();
  const pruned = await deps.db.transaction(async (tx) => {
    await tx.delete(domains).where(eq(domains.id, domain.id));
    await tx.update(domainKeys).set({ releasedAt: now }).where(eq(domainKeys.id, domain.keyId));
    return await pruneKeptDomainKeys(tx, ctx.account.id);
  });
  deps.logger.info('domain.deleted', { domainId: domain.id, accountId: ctx.account.id, name: domain.name, keysPruned: pruned.length });
}

/** The four records as DNS shows them now, read concurrently. */
async function readChecks(deps: Pick<Deps, 'config' | 'resolver'>, name: string, key: DomainKeyRow): Promise<Checks> {
  const [ownership, spf, mx, signing] = await Promise.all([
    deps.resolver.txt(`_service-verify.${name}`),
    deps.resolver.txt(name),
    deps.resolver.mx(name),
    deps.resolver.txt(`${key.selector}._domainkey.${name}`),
  ]);
  return {
    ownership: checkOwnership(ownership, key.token),
    receiving: checkMx(mx, deps.config.mailHostname),
    signing: checkSigning(signing, key.dkimPublicKey),
    spf: checkSpf(spf, deps.config.spfDomain),
  };
}

/**
 * POST /domains/{id}/verify: reads the four records now, stores what was found, answers the result. In capture mode a
 * name under a reserved TLD (shop.test) is found without asking DNS; every other name is always read from DNS.
 */
export async function verifyDomain({
  deps,
  ctx,
  id,
}: {
  deps: Pick<Deps, 'clock' | 'config' | 'db' | 'logger' | 'resolver'>;
  ctx: RequestContext;
  id: string;
}): Promise<DomainView & { checks: Checks }> {
  const { domain, key } = await requireDomain(deps, ctx, id);
  const name = domain.name;
  const withoutDns = verifiesWithoutDns(deps.config.deliveryMode, name);
  const checks: Checks = withoutDns ? { ...RESERVED_NAME_CHECKS } : await readChecks(deps, name, key);
  const now = deps.clock.now();
  // The domain may have been deleted or checked meanwhile: apply the checks to the row as it is now.
  const updated = await deps.db.transaction(async (tx) => {
    const current = await one(tx.select().from(domains).where(eq(domains.id, domain.id)));
    if (!current) return undefined;
    const recordStatus = Object.fromEntries(
      (Object.keys(checks) as RecordKind[]).map((k) => [k, nextRecordStatus(current.recordStatus[k], checks[k])]),
    ) as Record<RecordKind, RecordStatus>;
    return await one(tx.update(domains).set({ recordStatus, checks, lastCheckedAt: now }).where(eq(domains.id, domain.id)).returning());
  });
  if (!updated) throw notFound('domain');
  const before = deriveFlags(domain.recordStatus, deps.config.smtpRelayUrl !== null);
  const view = domainView(deps, updated, key);
  deps.logger.info('domain.verified', {
    domainId: domain.id,
    accountId: ctx.account.id,
    checks,
    withoutDns,
    status: view.status,
    sending: view.sending,
    receiving: view.receiving,
    was: before,
  });
  return { ...view, checks };
}
