-- A queued message's row is kept whole in the table's page while it fits one (about 8 KB), not compressed and moved
-- out to the TOAST table as soon as it passes 2 KB: the row lives only until its recipients have their outcomes, and
-- compressing it, writing its chunks and deleting them again cost more than its room (docs/performance.md, session 37).
-- Larger rows are compressed and moved out as before. Postgres has no SQLite counterpart to this.
ALTER TABLE "outbound_messages" SET (toast_tuple_target = 8160);
