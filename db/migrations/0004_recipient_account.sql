-- Queued recipients carry their account (the message's), backfilled for rows queued before this migration.
ALTER TABLE `outbound_recipients` ADD `account_id` text NOT NULL DEFAULT '';--> statement-breakpoint
UPDATE `outbound_recipients` SET `account_id` = (SELECT `account_id` FROM `outbound_messages` WHERE `outbound_messages`.`id` = `outbound_recipients`.`message_id`);--> statement-breakpoint
CREATE INDEX `outbound_recipients_account_due_idx` ON `outbound_recipients` (`status`,`account_id`,`next_attempt_at`,`id`);
