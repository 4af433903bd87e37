import { asc } from 'drizzle-orm';
import type { Db } from '../../db/client.js';
import { accounts } from '../../db/schema/index.js';
import { ApiError } from '../../server/errors.js';
import { isUuid } from '../../server/ids.js';

export interface AccountChoice {
  id: string;
  /** The name, after its parent's for a sub-account ("Parent / Sub"). */
  label: string;
}

/**
 * Every account, for the account pickers of the filters and forms: top-level accounts by name, each followed by its
 * sub-accounts. An install's accounts are counted in hundreds at most, so one select holds them all.
 */
export function accountChoices(db: Db): AccountChoice[] {
  const rows = db.select({ id: accounts.id, name: accounts.name, parentId: accounts.parentId }).from(accounts).orderBy(asc(accounts.name), asc(accounts.id)).all();
  const children = new Map<string, typeof rows>();
  for (const r of rows) if (r.parentId) children.set(r.parentId, [...(children.get(r.parentId) ?? []), r]);
  return rows
    .filter((r) => r.parentId === null)
    .flatMap((top) => [{ id: top.id, label: top.name }, ...(children.get(top.id) ?? []).map((sub) => ({ id: sub.id, label: `${top.name} / ${sub.name}` }))]);
}

/** A keyset cursor from the query string (the last id of the page before): absent, or a UUID. */
export function afterParam(value: string | undefined): string | null {
  if (value === undefined || value === '') return null;
  if (!isUuid(value)) throw new ApiError('invalid_request', 'after: is not a row id of this list.');
  return value;
}
