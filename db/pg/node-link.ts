import pg from 'pg';
import { type PgTarget, connectionConfig } from './state.js';

/**
 * A node's own connection to the state database (docs/api/decisions.md section 12), beside the pool: it holds the
 * node's liveness lock (a session-level advisory lock on its NODE_NAME, which Postgres drops the moment the
 * connection ends: a node killed, its machine gone), the locks on shared work that must end with the node (one batch
 * at a time per customer database), and LISTENs for the other nodes' queue wakes.
 *
 * Its `application_name` is `mailstead:<node>`, so the live nodes are read by name in one statement: the sessions
 * holding a liveness lock. Never used for a transaction: each statement here is short and stands alone.
 */

/** The class of the liveness locks: `pg_advisory_lock(NODE_LOCK_CLASS, hashtext(<node>))`. "MNOD". */
const NODE_LOCK_CLASS = 0x4d4e4f44;
/** The classes of the locks a node holds on work shared across nodes, one per kind. */
const WORK_LOCK_CLASSES = { 'customer-db': 0x4d434442 } as const; // "MCDB"
export type WorkLockKind = keyof typeof WORK_LOCK_CLASSES;

const APPLICATION_PREFIX = 'mailstead:';
/** The channel of the queue wakes: payload `<queue> <node>`. */
const QUEUE_CHANNEL = 'mailstead_queues';

/** Another live process holds the liveness lock of this NODE_NAME (two nodes given the same name). */
export class NodeNameTakenError extends Error {
  override name = 'NodeNameTakenError';
}

export interface NodeLink {
  readonly node: string;
  /** The nodes whose liveness lock is held now (this one among them). */
  liveNodes(): Promise<Set<string>>;
  /** Tells every node listening that `queue` has work (a hint: they claim what is due). */
  notifyQueued(queue: string): Promise<void>;
  /** Takes the lock of (kind, key) on this connection unless another session holds it; whether it was taken. */
  tryLock(kind: WorkLockKind, key: string): Promise<boolean>;
  /** Gives back a lock tryLock took. */
  unlock(kind: WorkLockKind, key: string): Promise<void>;
  /** Settles when the connection is lost (not closed by close()): its locks are gone with it. */
  readonly lost: Promise<Error>;
  close(): Promise<void>;
}

export interface NodeLinkOptions {
  /** A wake from another node: the queue it named. */
  onQueued: (queue: string) => void;
  /** How long to wait for the lock of this name when a session still holds it (an earlier run, killed a moment ago). */
  waitMs: number;
  /** Pause between two tries of the lock. */
  retryMs?: number;
}

/** Opens the link and takes the node's liveness lock; NodeNameTakenError when another session keeps it past waitMs. */
export async function openNodeLink(target: PgTarget, node: string, opts: NodeLinkOptions): Promise<NodeLink> {
  const client = new pg.Client({ ...connectionConfig(target), application_name: `${APPLICATION_PREFIX}${node}` });
  let closing = false;
  let markLost: (err: Error) => void = () => undefined;
  const lost = new Promise<Error>((resolve) => {
    markLost = resolve;
  });
  client.on('error', (err) => {
    if (!closing) markLost(err);
  });
  client.on('end', () => {
    if (!closing) markLost(new Error('the connection to the state database ended'));
  });
  client.on('notification', (n) => {
    if (n.channel !== QUEUE_CHANNEL || !n.payload) return;
    const [queue, from] = n.payload.split(' ');
    if (queue && from !== node) opts.onQueued(queue);
  });
  try {
    await client.connect();
    const deadline = Date.now() + opts.waitMs;
    for (;;) {
      const { rows } = await client.query<{ ok: boolean }>('select pg_try_advisory_lock($1, hashtext($2)) as ok', [NODE_LOCK_CLASS, node]);
      if (rows[0]?.ok) break;
      if (Date.now() >= deadline) {
        throw new NodeNameTakenError(
          `another node named "${node}" is running on this state database (its liveness lock stayed held for ${Math.round(opts.waitMs / 1000)} s): give each node its own NODE_NAME`,
        );
      }
      await new Promise((r) => setTimeout(r, opts.retryMs ?? 200));
    }
    await client.query(`LISTEN ${QUEUE_CHANNEL}`);
  } catch (err) {
    closing = true;
    await client.end().catch(() => undefined);
    throw err;
  }

  return {
    node,
    lost,
    async liveNodes() {
      const { rows } = await client.query<{ node: string }>(
        `select substr(a.application_name, $2) as node
         from pg_catalog.pg_locks l join pg_catalog.pg_stat_activity a on a.pid = l.pid
         where l.locktype = 'advisory' and l.classid = $1::bigint::oid and l.objsubid = 2 and l.granted
           and starts_with(a.application_name, $3)`,
        [NODE_LOCK_CLASS, APPLICATION_PREFIX.length + 1, APPLICATION_PREFIX],
      );
      return new Set(rows.map((r) => r.node));
    },
    async notifyQueued(queue) {
      await client.query('select pg_notify($1, $2)', [QUEUE_CHANNEL, `${queue} ${node}`]);
    },
    async tryLock(kind, key) {
      const { rows } = await client.query<{ ok: boolean }>('select pg_try_advisory_lock($1, hashtext($2)) as ok', [WORK_LOCK_CLASSES[kind], key]);
      return rows[0]?.ok === true;
    },
    async unlock(kind, key) {
      await client.query('select pg_advisory_unlock($1, hashtext($2))', [WORK_LOCK_CLASSES[kind], key]);
    },
    async close() {
      closing = true;
      await client.end().catch(() => undefined);
    },
  };
}
