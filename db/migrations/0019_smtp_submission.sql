CREATE TABLE `submitted_messages` (
	`account_id` text NOT NULL,
	`message_id` text NOT NULL,
	`email_id` text NOT NULL,
	`created_at` integer NOT NULL,
	PRIMARY KEY(`account_id`, `message_id`),
	FOREIGN KEY (`account_id`) REFERENCES `accounts`(`id`) ON UPDATE no action ON DELETE cascade,
	FOREIGN KEY (`email_id`) REFERENCES `emails`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `submitted_messages_created_idx` ON `submitted_messages` (`created_at`);--> statement-breakpoint
ALTER TABLE `emails` ADD `source` text DEFAULT 'api' NOT NULL;--> statement-breakpoint
ALTER TABLE `outbound_messages` ADD `raw` blob;