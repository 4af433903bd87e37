CREATE TABLE `domain_keys` (
	`id` text PRIMARY KEY NOT NULL,
	`account_id` text NOT NULL,
	`name` text NOT NULL,
	`token` text NOT NULL,
	`selector` text NOT NULL,
	`dkim_public_key` text NOT NULL,
	`dkim_private_key_sealed` text NOT NULL,
	`created_at` integer NOT NULL,
	FOREIGN KEY (`account_id`) REFERENCES `accounts`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE UNIQUE INDEX `domain_keys_account_name_idx` ON `domain_keys` (`account_id`,`name`);--> statement-breakpoint
CREATE TABLE `domains` (
	`id` text PRIMARY KEY NOT NULL,
	`account_id` text NOT NULL,
	`name` text NOT NULL,
	`key_id` text NOT NULL,
	`record_status` text NOT NULL,
	`checks` text,
	`created_at` integer NOT NULL,
	`last_checked_at` integer NOT NULL,
	FOREIGN KEY (`account_id`) REFERENCES `accounts`(`id`) ON UPDATE no action ON DELETE cascade,
	FOREIGN KEY (`key_id`) REFERENCES `domain_keys`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE UNIQUE INDEX `domains_account_name_idx` ON `domains` (`account_id`,`name`);--> statement-breakpoint
CREATE INDEX `domains_name_idx` ON `domains` (`name`);--> statement-breakpoint
CREATE INDEX `domains_account_idx` ON `domains` (`account_id`,`id`);