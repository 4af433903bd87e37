CREATE TABLE `rate_hits` (
	`scope` text NOT NULL,
	`at` integer NOT NULL
);
--> statement-breakpoint
CREATE INDEX `rate_hits_scope_idx` ON `rate_hits` (`scope`,`at`);--> statement-breakpoint
CREATE TABLE `inbound_spool_records` (
	`spool_id` text NOT NULL,
	`seq` integer NOT NULL,
	`record` blob NOT NULL,
	`created_at` integer NOT NULL,
	PRIMARY KEY(`spool_id`, `seq`)
);
--> statement-breakpoint
ALTER TABLE `idempotency_keys` ADD `held_by` text;--> statement-breakpoint
ALTER TABLE `dashboard_sessions` ADD `flash_secret_sealed` blob;--> statement-breakpoint
ALTER TABLE `dashboard_sessions` ADD `flash_secret_until` integer;