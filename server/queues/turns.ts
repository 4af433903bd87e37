/**
 * Accounts in turn: the first item of every list, then the second of every list, and so on, up to `limit` items. Each
 * list is one account's due work, oldest first; so one account's backlog, however early, never keeps another's due
 * work from being taken.
 */
export function takeInTurns<T>(lists: readonly (readonly T[])[], limit: number): T[] {
  const taken: T[] = [];
  for (let turn = 0; taken.length < limit && lists.some((list) => turn < list.length); turn++) {
    for (const list of lists) if (turn < list.length && taken.length < limit) taken.push(list[turn]!);
  }
  return taken;
}
