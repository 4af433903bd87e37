import type { FC, PropsWithChildren } from 'hono/jsx';

/**
 * A .table-wrap that a keyboard can scroll: on a phone a wide table scrolls inside it, and a table without links
 * would leave that scroll out of the keyboard's reach, so the region itself takes focus (and is named for it).
 */
export const TableRegion: FC<PropsWithChildren<{ label: string }>> = ({ label, children }) => (
  <div class="table-wrap" tabindex={0} role="region" aria-label={label}>
    {children}
  </div>
);
