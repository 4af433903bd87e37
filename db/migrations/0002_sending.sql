CREATE TABLE `emails` (
	`id` text PRIMARY KEY NOT NULL,
	`account_id` text NOT NULL,
	`from_address` text NOT NULL,
	`to` text NOT NULL,
	`subject` text NOT NULL,
	`template` text NOT NULL,
	`status` text NOT NULL,
	`error` text,
	`tags` text,
	`sandbox` integer NOT NULL,
	`created_at` integer NOT NULL,
	`delivered_at` integer,
	`bounced_at` integer,
	`complained_at` integer,
	FOREIGN KEY (`account_id`) REFERENCES `accounts`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `emails_account_idx` ON `emails` (`account_id`,`id`);--> statement-breakpoint
CREATE INDEX `emails_account_status_idx` ON `emails` (`account_id`,`status`,`created_at`);--> statement-breakpoint
CREATE TABLE `email_events` (
	`id` text PRIMARY KEY NOT NULL,
	`email_id` text NOT NULL,
	`recipient` text NOT NULL,
	`status` text NOT NULL,
	`dsn` text NOT NULL,
	`detail` text NOT NULL,
	`occurred_at` integer NOT NULL,
	FOREIGN KEY (`email_id`) REFERENCES `emails`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `email_events_email_idx` ON `email_events` (`email_id`,`id`);--> statement-breakpoint
CREATE TABLE `outbound_messages` (
	`id` text PRIMARY KEY NOT NULL,
	`account_id` text NOT NULL,
	`domain_key_id` text NOT NULL,
	`from_header` text NOT NULL,
	`from_address` text NOT NULL,
	`reply_to_header` text,
	`message_id` text NOT NULL,
	`subject` text NOT NULL,
	`html` text NOT NULL,
	`text` text NOT NULL,
	`created_at` integer NOT NULL,
	`expires_at` integer NOT NULL,
	FOREIGN KEY (`id`) REFERENCES `emails`(`id`) ON UPDATE no action ON DELETE cascade,
	FOREIGN KEY (`account_id`) REFERENCES `accounts`(`id`) ON UPDATE no action ON DELETE cascade,
	FOREIGN KEY (`domain_key_id`) REFERENCES `domain_keys`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE TABLE `outbound_recipients` (
	`id` text PRIMARY KEY NOT NULL,
	`message_id` text NOT NULL,
	`recipient` text NOT NULL,
	`recipient_domain` text NOT NULL,
	`status` text NOT NULL,
	`attempts` integer DEFAULT 0 NOT NULL,
	`next_attempt_at` integer NOT NULL,
	`locked_by` text,
	`locked_until` integer,
	`created_at` integer NOT NULL,
	FOREIGN KEY (`message_id`) REFERENCES `outbound_messages`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `outbound_recipients_due_idx` ON `outbound_recipients` (`status`,`next_attempt_at`);--> statement-breakpoint
CREATE INDEX `outbound_recipients_message_idx` ON `outbound_recipients` (`message_id`);--> statement-breakpoint
CREATE TABLE `idempotency_keys` (
	`account_id` text NOT NULL,
	`key` text NOT NULL,
	`fingerprint` text NOT NULL,
	`claim_token` text NOT NULL,
	`state` text NOT NULL,
	`response` text,
	`claimed_at` integer NOT NULL,
	`completed_at` integer,
	PRIMARY KEY(`account_id`, `key`),
	FOREIGN KEY (`account_id`) REFERENCES `accounts`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE TABLE `suppressions` (
	`id` text PRIMARY KEY NOT NULL,
	`account_id` text NOT NULL,
	`address` text NOT NULL,
	`reason` text NOT NULL,
	`detail` text DEFAULT '' NOT NULL,
	`created_at` integer NOT NULL,
	FOREIGN KEY (`account_id`) REFERENCES `accounts`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE UNIQUE INDEX `suppressions_account_address_idx` ON `suppressions` (`account_id`,`address`);--> statement-breakpoint
CREATE INDEX `suppressions_account_idx` ON `suppressions` (`account_id`,`id`);