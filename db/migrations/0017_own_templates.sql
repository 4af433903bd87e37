CREATE TABLE `template_versions` (
	`template_id` text NOT NULL,
	`version` integer NOT NULL,
	`subject` text,
	`html` text,
	`text` text,
	`layout` text,
	`variables` text NOT NULL,
	`created_at` integer NOT NULL,
	PRIMARY KEY(`template_id`, `version`),
	FOREIGN KEY (`template_id`) REFERENCES `templates`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE TABLE `templates` (
	`id` text PRIMARY KEY NOT NULL,
	`account_id` text NOT NULL,
	`name` text NOT NULL,
	`kind` text NOT NULL,
	`version` integer NOT NULL,
	`created_at` integer NOT NULL,
	`updated_at` integer NOT NULL,
	FOREIGN KEY (`account_id`) REFERENCES `accounts`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE UNIQUE INDEX `templates_account_name_idx` ON `templates` (`account_id`,`name`);--> statement-breakpoint
ALTER TABLE `emails` ADD `template_version` integer;--> statement-breakpoint
ALTER TABLE `emails` ADD `attachments` text;--> statement-breakpoint
ALTER TABLE `outbound_messages` ADD `attachments` text;