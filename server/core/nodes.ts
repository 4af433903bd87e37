/**
 * The nodes sharing the queues, as a worker sees them (docs/api/decisions.md section 12). On SQLite, or on Postgres
 * before the node's liveness starts (tests, tools), one node: this process. With several nodes on Postgres,
 * server/app/liveness.ts gives the live picture from the nodes' liveness locks.
 */
export interface Nodes {
  /** This node's NODE_NAME: what its workers' lease holder ids start with. */
  readonly name: string;
  /** How many nodes are live now (1 for a single node). */
  liveCount(): number;
  /**
   * This node's share of a limit split between the live nodes (connections per destination): `shareOf` over the live
   * names as this node last read them; the whole limit for a single node.
   */
  share(limit: number): number;
  /** At a worker's start, the judge of the leases other holders left: true where the holder is gone (release now). */
  deadHolders(worker: string): Promise<(holder: string) => boolean>;
  /**
   * Holds (kind, key) across nodes while `work` runs (one batch at a time per customer database): `work`'s result, or
   * `skipped` when another node holds it now. A single node holds it at once (its own worker serializes its work).
   */
  exclusive<T>(kind: 'customer-db', key: string, work: () => Promise<T>): Promise<T | typeof skipped>;
}

export const skipped: unique symbol = Symbol('held by another node');

/**
 * A node's share of `limit` split between the live nodes `live` (this node, `self`, among them or not): the limit
 * divided evenly, the remainder one each to the first nodes by name, so the shares add up to the limit exactly; at least
 * one each (more nodes than the limit then hold one each).
 */
export function shareOf(limit: number, live: Iterable<string>, self: string): number {
  const names = [...new Set([...live, self])].sort();
  const even = Math.floor(limit / names.length);
  return Math.max(1, even + (names.indexOf(self) < limit % names.length ? 1 : 0));
}
