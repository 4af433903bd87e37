CREATE TABLE `captured_messages` (
	`seq` integer PRIMARY KEY NOT NULL,
	`email_id` text NOT NULL,
	`account_id` text NOT NULL,
	`recipient` text NOT NULL,
	`message_sealed` blob NOT NULL,
	`created_at` integer NOT NULL,
	FOREIGN KEY (`email_id`) REFERENCES `emails`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE UNIQUE INDEX `captured_messages_recipient_idx` ON `captured_messages` (`email_id`,`recipient`);