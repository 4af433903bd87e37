import type { Claimed } from '../delivery-queue.js';

/** A claimed recipient in the engine, with whoever waits for it to be finished (recorded, released or abandoned). */
export interface Job extends Claimed {
  finish: () => void;
}

/**
 * The work of one account for one destination domain: its recipients waiting for a connection, and the connections
 * (lanes) serving them. Accounts never share a lane, so each connection slot belongs to one account (fairness).
 */
export interface DomainWork {
  key: string;
  account: string;
  domain: string;
  jobs: Job[];
  lanes: number;
  /** Lanes with an open connection, or opening one. */
  live: number;
}
