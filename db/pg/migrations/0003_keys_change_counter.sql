-- The keys change counter and its triggers, as SQLite's db/migrations/0021_keys_change_counter.sql makes them.
INSERT INTO "change_counters" ("name", "n") VALUES ('keys', 0);
--> statement-breakpoint
CREATE TRIGGER "keys_changed_update" AFTER UPDATE OF "revoked_at", "key_hash", "account_id" ON "api_keys" FOR EACH ROW EXECUTE FUNCTION "change_counters_raise"('keys');
--> statement-breakpoint
CREATE TRIGGER "keys_changed_delete" AFTER DELETE ON "api_keys" FOR EACH ROW EXECUTE FUNCTION "change_counters_raise"('keys');
--> statement-breakpoint
CREATE TRIGGER "keys_changed_accounts_delete" AFTER DELETE ON "accounts" FOR EACH ROW EXECUTE FUNCTION "change_counters_raise"('keys');
