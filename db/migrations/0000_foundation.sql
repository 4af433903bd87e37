CREATE TABLE `accounts` (
	`id` text PRIMARY KEY NOT NULL,
	`parent_id` text,
	`name` text NOT NULL,
	`created_at` integer NOT NULL,
	`daily_quota` integer NOT NULL,
	`sent_today_day` text,
	`sent_today_count` integer DEFAULT 0 NOT NULL,
	`total_sent` integer DEFAULT 0 NOT NULL,
	`total_bounced` integer DEFAULT 0 NOT NULL,
	`total_complained` integer DEFAULT 0 NOT NULL,
	`suspended_at` integer,
	`suspended_by` text,
	`suspended_reason` text,
	`credits_balance` integer DEFAULT 0 NOT NULL,
	`credits_total_purchased` integer DEFAULT 0 NOT NULL,
	`credits_total_used` integer DEFAULT 0 NOT NULL,
	`free_until` integer,
	`grace_started_at` integer,
	`grace_emails_used` integer DEFAULT 0 NOT NULL,
	FOREIGN KEY (`parent_id`) REFERENCES `accounts`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `accounts_parent_idx` ON `accounts` (`parent_id`,`id`);--> statement-breakpoint
CREATE TABLE `api_keys` (
	`id` text PRIMARY KEY NOT NULL,
	`account_id` text NOT NULL,
	`name` text NOT NULL,
	`prefix` text NOT NULL,
	`key_hash` text NOT NULL,
	`scopes` text NOT NULL,
	`created_at` integer NOT NULL,
	`last_used_at` integer,
	`revoked_at` integer,
	FOREIGN KEY (`account_id`) REFERENCES `accounts`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE UNIQUE INDEX `api_keys_hash_idx` ON `api_keys` (`key_hash`);--> statement-breakpoint
CREATE INDEX `api_keys_account_idx` ON `api_keys` (`account_id`,`id`);--> statement-breakpoint
CREATE TABLE `settings` (
	`key` text PRIMARY KEY NOT NULL,
	`value` text NOT NULL
);
