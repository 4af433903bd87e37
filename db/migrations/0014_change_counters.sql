CREATE TABLE `change_counters` (
	`name` text PRIMARY KEY NOT NULL,
	`n` integer DEFAULT 0 NOT NULL
);
--> statement-breakpoint
INSERT INTO `change_counters` (`name`, `n`) VALUES ('recipients', 0);
--> statement-breakpoint
CREATE TRIGGER `recipients_changed_domains_insert` AFTER INSERT ON `domains` BEGIN UPDATE `change_counters` SET `n` = `n` + 1 WHERE `name` = 'recipients'; END;
--> statement-breakpoint
CREATE TRIGGER `recipients_changed_domains_update` AFTER UPDATE OF `account_id`, `name`, `record_status` ON `domains` BEGIN UPDATE `change_counters` SET `n` = `n` + 1 WHERE `name` = 'recipients'; END;
--> statement-breakpoint
CREATE TRIGGER `recipients_changed_domains_delete` AFTER DELETE ON `domains` BEGIN UPDATE `change_counters` SET `n` = `n` + 1 WHERE `name` = 'recipients'; END;
--> statement-breakpoint
CREATE TRIGGER `recipients_changed_accounts_insert` AFTER INSERT ON `accounts` BEGIN UPDATE `change_counters` SET `n` = `n` + 1 WHERE `name` = 'recipients'; END;
--> statement-breakpoint
CREATE TRIGGER `recipients_changed_accounts_update` AFTER UPDATE OF `id`, `parent_id` ON `accounts` BEGIN UPDATE `change_counters` SET `n` = `n` + 1 WHERE `name` = 'recipients'; END;
--> statement-breakpoint
CREATE TRIGGER `recipients_changed_accounts_delete` AFTER DELETE ON `accounts` BEGIN UPDATE `change_counters` SET `n` = `n` + 1 WHERE `name` = 'recipients'; END;
--> statement-breakpoint
CREATE TRIGGER `recipients_changed_customer_databases_insert` AFTER INSERT ON `customer_databases` BEGIN UPDATE `change_counters` SET `n` = `n` + 1 WHERE `name` = 'recipients'; END;
--> statement-breakpoint
CREATE TRIGGER `recipients_changed_customer_databases_update` AFTER UPDATE OF `account_id` ON `customer_databases` BEGIN UPDATE `change_counters` SET `n` = `n` + 1 WHERE `name` = 'recipients'; END;
--> statement-breakpoint
CREATE TRIGGER `recipients_changed_customer_databases_delete` AFTER DELETE ON `customer_databases` BEGIN UPDATE `change_counters` SET `n` = `n` + 1 WHERE `name` = 'recipients'; END;
