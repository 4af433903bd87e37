-- The `suppressions` change counter has no reader since SMTP submission's commit counts the listed recipients in its
-- own reading (server/core/submission.ts): its triggers (0020_suppressions_change_counter.sql) and its row go.
DROP TRIGGER IF EXISTS `suppressions_changed_insert`;
--> statement-breakpoint
DROP TRIGGER IF EXISTS `suppressions_changed_update`;
--> statement-breakpoint
DROP TRIGGER IF EXISTS `suppressions_changed_delete`;
--> statement-breakpoint
DROP TRIGGER IF EXISTS `suppressions_changed_accounts_update`;
--> statement-breakpoint
DELETE FROM `change_counters` WHERE `name` = 'suppressions';
