CREATE TABLE `customer_databases` (
	`account_id` text PRIMARY KEY NOT NULL,
	`connection_id` text NOT NULL,
	`url_sealed` text NOT NULL,
	`host` text NOT NULL,
	`port` integer NOT NULL,
	`database` text NOT NULL,
	`user` text NOT NULL,
	`ssl_mode` text NOT NULL,
	`state` text NOT NULL,
	`schema_version` integer NOT NULL,
	`last_ok_at` integer,
	`last_error` text,
	`last_error_kind` text,
	`failures` integer DEFAULT 0 NOT NULL,
	`next_attempt_at` integer NOT NULL,
	`updated_at` integer NOT NULL,
	`created_at` integer NOT NULL,
	FOREIGN KEY (`account_id`) REFERENCES `accounts`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE TABLE `customer_db_writes` (
	`id` text PRIMARY KEY NOT NULL,
	`database_account_id` text NOT NULL,
	`account_id` text NOT NULL,
	`kind` text NOT NULL,
	`payload_sealed` text NOT NULL,
	`attempts` integer DEFAULT 0 NOT NULL,
	`next_attempt_at` integer NOT NULL,
	`set_aside_at` integer,
	`last_error` text,
	`created_at` integer NOT NULL,
	FOREIGN KEY (`database_account_id`) REFERENCES `accounts`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `customer_db_writes_pending_idx` ON `customer_db_writes` (`database_account_id`,`id`) WHERE "customer_db_writes"."set_aside_at" is null;--> statement-breakpoint
CREATE INDEX `customer_db_writes_created_idx` ON `customer_db_writes` (`created_at`);