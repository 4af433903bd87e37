-- The `suppressions` change counter has no reader since SMTP submission's commit counts the listed recipients in its
-- own reading (server/core/submission.ts): its triggers (0001_change_counters.sql) and its row go. Every transaction
-- that wrote a suppression also updated that one row, so suppressions written on several nodes took turns on it.
DROP TRIGGER IF EXISTS "suppressions_changed_insert" ON "suppressions";
--> statement-breakpoint
DROP TRIGGER IF EXISTS "suppressions_changed_update" ON "suppressions";
--> statement-breakpoint
DROP TRIGGER IF EXISTS "suppressions_changed_delete" ON "suppressions";
--> statement-breakpoint
DROP TRIGGER IF EXISTS "suppressions_changed_accounts_update" ON "accounts";
--> statement-breakpoint
DELETE FROM "change_counters" WHERE "name" = 'suppressions';
