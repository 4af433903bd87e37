CREATE TABLE `rate_counts` (
	`scope` text PRIMARY KEY NOT NULL,
	`n` integer NOT NULL
);
