INSERT INTO `change_counters` (`name`, `n`) VALUES ('templates', 0);
--> statement-breakpoint
CREATE TRIGGER `templates_changed_templates_insert` AFTER INSERT ON `templates` BEGIN UPDATE `change_counters` SET `n` = `n` + 1 WHERE `name` = 'templates'; END;
--> statement-breakpoint
CREATE TRIGGER `templates_changed_templates_update` AFTER UPDATE OF `id`, `account_id`, `name`, `kind`, `version` ON `templates` BEGIN UPDATE `change_counters` SET `n` = `n` + 1 WHERE `name` = 'templates'; END;
--> statement-breakpoint
CREATE TRIGGER `templates_changed_templates_delete` AFTER DELETE ON `templates` BEGIN UPDATE `change_counters` SET `n` = `n` + 1 WHERE `name` = 'templates'; END;
--> statement-breakpoint
CREATE TRIGGER `templates_changed_template_versions_insert` AFTER INSERT ON `template_versions` BEGIN UPDATE `change_counters` SET `n` = `n` + 1 WHERE `name` = 'templates'; END;
--> statement-breakpoint
CREATE TRIGGER `templates_changed_template_versions_update` AFTER UPDATE OF `template_id`, `version`, `layout` ON `template_versions` BEGIN UPDATE `change_counters` SET `n` = `n` + 1 WHERE `name` = 'templates'; END;
--> statement-breakpoint
CREATE TRIGGER `templates_changed_template_versions_delete` AFTER DELETE ON `template_versions` BEGIN UPDATE `change_counters` SET `n` = `n` + 1 WHERE `name` = 'templates'; END;
--> statement-breakpoint
CREATE TRIGGER `templates_changed_accounts_update` AFTER UPDATE OF `id`, `parent_id` ON `accounts` BEGIN UPDATE `change_counters` SET `n` = `n` + 1 WHERE `name` = 'templates'; END;
--> statement-breakpoint
CREATE TRIGGER `templates_changed_accounts_delete` AFTER DELETE ON `accounts` BEGIN UPDATE `change_counters` SET `n` = `n` + 1 WHERE `name` = 'templates'; END;
