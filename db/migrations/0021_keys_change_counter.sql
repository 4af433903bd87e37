-- The keys change counter: raised whenever an API key may stop working (revoked, or deleted with its account), by any
-- connection (the CLI beside the server included), so the request guard's cache of known keys starts over
-- (server/core/keys.ts). It replaces SQLite's PRAGMA data_version, which has no twin on Postgres.
INSERT INTO `change_counters` (`name`, `n`) VALUES ('keys', 0);
--> statement-breakpoint
CREATE TRIGGER `keys_changed_update` AFTER UPDATE OF `revoked_at`, `key_hash`, `account_id` ON `api_keys` BEGIN UPDATE `change_counters` SET `n` = `n` + 1 WHERE `name` = 'keys'; END;
--> statement-breakpoint
CREATE TRIGGER `keys_changed_delete` AFTER DELETE ON `api_keys` BEGIN UPDATE `change_counters` SET `n` = `n` + 1 WHERE `name` = 'keys'; END;
--> statement-breakpoint
CREATE TRIGGER `keys_changed_accounts_delete` AFTER DELETE ON `accounts` BEGIN UPDATE `change_counters` SET `n` = `n` + 1 WHERE `name` = 'keys'; END;
