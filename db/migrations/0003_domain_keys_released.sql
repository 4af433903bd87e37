ALTER TABLE `domain_keys` ADD `released_at` integer;--> statement-breakpoint
CREATE INDEX `outbound_messages_domain_key_idx` ON `outbound_messages` (`domain_key_id`);