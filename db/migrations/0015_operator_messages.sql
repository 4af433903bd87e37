CREATE TABLE `operator_messages` (
	`seq` integer PRIMARY KEY NOT NULL,
	`id` text NOT NULL,
	`recipients` text NOT NULL,
	`mail_from` text NOT NULL,
	`from_header` text NOT NULL,
	`subject` text NOT NULL,
	`remote_address` text NOT NULL,
	`helo` text NOT NULL,
	`size` integer NOT NULL,
	`truncated` integer NOT NULL,
	`message_sealed` blob NOT NULL,
	`received_at` integer NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `operator_messages_id_idx` ON `operator_messages` (`id`);