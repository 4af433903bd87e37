-- Recorded outcomes carry their email's account, backfilled for the rows recorded before this migration.
ALTER TABLE `email_events` ADD `account_id` text NOT NULL DEFAULT '';--> statement-breakpoint
UPDATE `email_events` SET `account_id` = (SELECT `account_id` FROM `emails` WHERE `emails`.`id` = `email_events`.`email_id`);--> statement-breakpoint
CREATE INDEX `email_events_account_idx` ON `email_events` (`account_id`,`id`);
