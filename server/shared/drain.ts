/**
 * Whether this node is stopping (docs/operating/several-nodes.md, draining): from the stop's first step `/healthz`
 * answers 503 `draining`, so a load balancer takes the node out while it still answers what reaches it and its workers
 * finish what they hold (server/app/serve.ts).
 */
export interface Drain {
  readonly draining: boolean;
  begin(): void;
}

export function createDrain(): Drain {
  let draining = false;
  return {
    get draining() {
      return draining;
    },
    begin() {
      draining = true;
    },
  };
}
