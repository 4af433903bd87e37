-- The change counters of db/schema/change-counters.ts and the triggers that raise them, as SQLite's migrations made
-- them (db/migrations/0014_change_counters.sql, 0018_templates_change_counter.sql, 0020_suppressions_change_counter.sql):
-- the same counter rows, the same trigger names, on the same tables, events and columns. A trigger here is FOR EACH
-- ROW, as every SQLite trigger is, so a counter moves by the rows changed, as it does there; `UPDATE OF` fires when a
-- listed column is SET, changed or not, on both engines. One function raises them all, the counter named by the
-- trigger's argument.
INSERT INTO "change_counters" ("name", "n") VALUES ('recipients', 0), ('templates', 0), ('suppressions', 0);
--> statement-breakpoint
CREATE FUNCTION "change_counters_raise"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE "change_counters" SET "n" = "n" + 1 WHERE "name" = TG_ARGV[0];
  RETURN NULL;
END;
$$;
--> statement-breakpoint
CREATE TRIGGER "recipients_changed_domains_insert" AFTER INSERT ON "domains" FOR EACH ROW EXECUTE FUNCTION "change_counters_raise"('recipients');
--> statement-breakpoint
CREATE TRIGGER "recipients_changed_domains_update" AFTER UPDATE OF "account_id", "name", "record_status" ON "domains" FOR EACH ROW EXECUTE FUNCTION "change_counters_raise"('recipients');
--> statement-breakpoint
CREATE TRIGGER "recipients_changed_domains_delete" AFTER DELETE ON "domains" FOR EACH ROW EXECUTE FUNCTION "change_counters_raise"('recipients');
--> statement-breakpoint
CREATE TRIGGER "recipients_changed_accounts_insert" AFTER INSERT ON "accounts" FOR EACH ROW EXECUTE FUNCTION "change_counters_raise"('recipients');
--> statement-breakpoint
CREATE TRIGGER "recipients_changed_accounts_update" AFTER UPDATE OF "id", "parent_id" ON "accounts" FOR EACH ROW EXECUTE FUNCTION "change_counters_raise"('recipients');
--> statement-breakpoint
CREATE TRIGGER "recipients_changed_accounts_delete" AFTER DELETE ON "accounts" FOR EACH ROW EXECUTE FUNCTION "change_counters_raise"('recipients');
--> statement-breakpoint
CREATE TRIGGER "recipients_changed_customer_databases_insert" AFTER INSERT ON "customer_databases" FOR EACH ROW EXECUTE FUNCTION "change_counters_raise"('recipients');
--> statement-breakpoint
CREATE TRIGGER "recipients_changed_customer_databases_update" AFTER UPDATE OF "account_id" ON "customer_databases" FOR EACH ROW EXECUTE FUNCTION "change_counters_raise"('recipients');
--> statement-breakpoint
CREATE TRIGGER "recipients_changed_customer_databases_delete" AFTER DELETE ON "customer_databases" FOR EACH ROW EXECUTE FUNCTION "change_counters_raise"('recipients');
--> statement-breakpoint
CREATE TRIGGER "templates_changed_templates_insert" AFTER INSERT ON "templates" FOR EACH ROW EXECUTE FUNCTION "change_counters_raise"('templates');
--> statement-breakpoint
CREATE TRIGGER "templates_changed_templates_update" AFTER UPDATE OF "id", "account_id", "name", "kind", "version" ON "templates" FOR EACH ROW EXECUTE FUNCTION "change_counters_raise"('templates');
--> statement-breakpoint
CREATE TRIGGER "templates_changed_templates_delete" AFTER DELETE ON "templates" FOR EACH ROW EXECUTE FUNCTION "change_counters_raise"('templates');
--> statement-breakpoint
CREATE TRIGGER "templates_changed_template_versions_insert" AFTER INSERT ON "template_versions" FOR EACH ROW EXECUTE FUNCTION "change_counters_raise"('templates');
--> statement-breakpoint
CREATE TRIGGER "templates_changed_template_versions_update" AFTER UPDATE OF "template_id", "version", "layout" ON "template_versions" FOR EACH ROW EXECUTE FUNCTION "change_counters_raise"('templates');
--> statement-breakpoint
CREATE TRIGGER "templates_changed_template_versions_delete" AFTER DELETE ON "template_versions" FOR EACH ROW EXECUTE FUNCTION "change_counters_raise"('templates');
--> statement-breakpoint
CREATE TRIGGER "templates_changed_accounts_update" AFTER UPDATE OF "id", "parent_id" ON "accounts" FOR EACH ROW EXECUTE FUNCTION "change_counters_raise"('templates');
--> statement-breakpoint
CREATE TRIGGER "templates_changed_accounts_delete" AFTER DELETE ON "accounts" FOR EACH ROW EXECUTE FUNCTION "change_counters_raise"('templates');
--> statement-breakpoint
CREATE TRIGGER "suppressions_changed_insert" AFTER INSERT ON "suppressions" FOR EACH ROW EXECUTE FUNCTION "change_counters_raise"('suppressions');
--> statement-breakpoint
CREATE TRIGGER "suppressions_changed_update" AFTER UPDATE OF "account_id", "address" ON "suppressions" FOR EACH ROW EXECUTE FUNCTION "change_counters_raise"('suppressions');
--> statement-breakpoint
CREATE TRIGGER "suppressions_changed_delete" AFTER DELETE ON "suppressions" FOR EACH ROW EXECUTE FUNCTION "change_counters_raise"('suppressions');
--> statement-breakpoint
CREATE TRIGGER "suppressions_changed_accounts_update" AFTER UPDATE OF "id", "parent_id" ON "accounts" FOR EACH ROW EXECUTE FUNCTION "change_counters_raise"('suppressions');
