/** Pieces the accounts and domains pages share: counts. */

const counts = new Intl.NumberFormat('en-US');
export const formatCount = (n: number): string => counts.format(n);
