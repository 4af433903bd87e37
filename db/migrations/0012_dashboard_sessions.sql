CREATE TABLE `dashboard_sessions` (
	`token_hash` text PRIMARY KEY NOT NULL,
	`csrf_token` text NOT NULL,
	`created_at` integer NOT NULL,
	`last_seen_at` integer NOT NULL,
	`flash` text
);
--> statement-breakpoint
CREATE INDEX `dashboard_sessions_last_seen_idx` ON `dashboard_sessions` (`last_seen_at`);