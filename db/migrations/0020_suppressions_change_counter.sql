INSERT INTO `change_counters` (`name`, `n`) VALUES ('suppressions', 0);
--> statement-breakpoint
CREATE TRIGGER `suppressions_changed_insert` AFTER INSERT ON `suppressions` BEGIN UPDATE `change_counters` SET `n` = `n` + 1 WHERE `name` = 'suppressions'; END;
--> statement-breakpoint
CREATE TRIGGER `suppressions_changed_update` AFTER UPDATE OF `account_id`, `address` ON `suppressions` BEGIN UPDATE `change_counters` SET `n` = `n` + 1 WHERE `name` = 'suppressions'; END;
--> statement-breakpoint
CREATE TRIGGER `suppressions_changed_delete` AFTER DELETE ON `suppressions` BEGIN UPDATE `change_counters` SET `n` = `n` + 1 WHERE `name` = 'suppressions'; END;
--> statement-breakpoint
CREATE TRIGGER `suppressions_changed_accounts_update` AFTER UPDATE OF `id`, `parent_id` ON `accounts` BEGIN UPDATE `change_counters` SET `n` = `n` + 1 WHERE `name` = 'suppressions'; END;
