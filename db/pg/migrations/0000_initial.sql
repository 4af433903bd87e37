CREATE TABLE "accounts" (
	"id" text PRIMARY KEY NOT NULL,
	"parent_id" text,
	"name" text NOT NULL,
	"created_at" bigint NOT NULL,
	"daily_quota" bigint NOT NULL,
	"sent_today_day" text,
	"sent_today_count" bigint DEFAULT 0 NOT NULL,
	"total_sent" bigint DEFAULT 0 NOT NULL,
	"total_bounced" bigint DEFAULT 0 NOT NULL,
	"total_complained" bigint DEFAULT 0 NOT NULL,
	"suspended_at" bigint,
	"suspended_by" text,
	"suspended_reason" text,
	"credits_balance" bigint DEFAULT 0 NOT NULL,
	"credits_total_purchased" bigint DEFAULT 0 NOT NULL,
	"credits_total_used" bigint DEFAULT 0 NOT NULL,
	"free_until" bigint,
	"grace_started_at" bigint,
	"grace_emails_used" bigint DEFAULT 0 NOT NULL
);
--> statement-breakpoint
CREATE TABLE "api_keys" (
	"id" text PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"name" text NOT NULL,
	"prefix" text NOT NULL,
	"key_hash" text NOT NULL,
	"scopes" json NOT NULL,
	"created_at" bigint NOT NULL,
	"last_used_at" bigint,
	"revoked_at" bigint
);
--> statement-breakpoint
CREATE TABLE "settings" (
	"key" text PRIMARY KEY NOT NULL,
	"value" text NOT NULL
);
--> statement-breakpoint
CREATE TABLE "domain_keys" (
	"id" text PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"name" text NOT NULL,
	"token" text NOT NULL,
	"selector" text NOT NULL,
	"dkim_public_key" text NOT NULL,
	"dkim_private_key_sealed" text NOT NULL,
	"created_at" bigint NOT NULL,
	"released_at" bigint
);
--> statement-breakpoint
CREATE TABLE "domains" (
	"id" text PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"name" text NOT NULL,
	"key_id" text NOT NULL,
	"record_status" json NOT NULL,
	"checks" json,
	"created_at" bigint NOT NULL,
	"last_checked_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "emails" (
	"id" text PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"from_address" text NOT NULL,
	"to" json NOT NULL,
	"subject" text NOT NULL,
	"template" text NOT NULL,
	"source" text DEFAULT 'api' NOT NULL,
	"template_version" bigint,
	"attachments" json,
	"status" text NOT NULL,
	"error" text,
	"tags" json,
	"sandbox" boolean NOT NULL,
	"created_at" bigint NOT NULL,
	"delivered_at" bigint,
	"bounced_at" bigint,
	"complained_at" bigint
);
--> statement-breakpoint
CREATE TABLE "email_events" (
	"id" text PRIMARY KEY NOT NULL,
	"email_id" text NOT NULL,
	"account_id" text NOT NULL,
	"recipient" text NOT NULL,
	"status" text NOT NULL,
	"dsn" text NOT NULL,
	"detail" text NOT NULL,
	"occurred_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "outbound_messages" (
	"id" text PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"domain_key_id" text NOT NULL,
	"from_header" text NOT NULL,
	"from_address" text NOT NULL,
	"reply_to_header" text,
	"message_id" text NOT NULL,
	"subject" text NOT NULL,
	"html" text NOT NULL,
	"text" text NOT NULL,
	"attachments" json,
	"raw" "bytea",
	"created_at" bigint NOT NULL,
	"expires_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "outbound_recipients" (
	"id" text PRIMARY KEY NOT NULL,
	"message_id" text NOT NULL,
	"account_id" text NOT NULL,
	"recipient" text NOT NULL,
	"recipient_domain" text NOT NULL,
	"status" text NOT NULL,
	"attempts" bigint DEFAULT 0 NOT NULL,
	"next_attempt_at" bigint NOT NULL,
	"locked_by" text,
	"locked_until" bigint,
	"created_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "idempotency_keys" (
	"account_id" text NOT NULL,
	"key" text NOT NULL,
	"fingerprint" text NOT NULL,
	"claim_token" text NOT NULL,
	"state" text NOT NULL,
	"response" json,
	"claimed_at" bigint NOT NULL,
	"completed_at" bigint,
	CONSTRAINT "idempotency_keys_account_id_key_pk" PRIMARY KEY("account_id","key")
);
--> statement-breakpoint
CREATE TABLE "suppressions" (
	"id" text PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"address" text NOT NULL,
	"reason" text NOT NULL,
	"detail" text DEFAULT '' NOT NULL,
	"created_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "webhook_endpoints" (
	"id" text PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"url" text NOT NULL,
	"events" json NOT NULL,
	"secret_sealed" text NOT NULL,
	"active" boolean DEFAULT true NOT NULL,
	"failure_count" bigint DEFAULT 0 NOT NULL,
	"disabled_at" bigint,
	"last_ping_at" bigint,
	"created_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "webhook_deliveries" (
	"id" text PRIMARY KEY NOT NULL,
	"endpoint_id" text NOT NULL,
	"account_id" text NOT NULL,
	"event_type" text NOT NULL,
	"data" text NOT NULL,
	"attempts" bigint DEFAULT 0 NOT NULL,
	"last_status" bigint,
	"last_error" text,
	"delivered_at" bigint,
	"next_attempt_at" bigint,
	"locked_by" text,
	"locked_until" bigint,
	"created_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "customer_databases" (
	"account_id" text PRIMARY KEY NOT NULL,
	"connection_id" text NOT NULL,
	"url_sealed" text NOT NULL,
	"host" text NOT NULL,
	"port" bigint NOT NULL,
	"database" text NOT NULL,
	"user" text NOT NULL,
	"ssl_mode" text NOT NULL,
	"state" text NOT NULL,
	"schema_version" bigint NOT NULL,
	"last_ok_at" bigint,
	"last_error" text,
	"last_error_kind" text,
	"failures" bigint DEFAULT 0 NOT NULL,
	"next_attempt_at" bigint NOT NULL,
	"updated_at" bigint NOT NULL,
	"created_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "customer_db_writes" (
	"id" text PRIMARY KEY NOT NULL,
	"database_account_id" text NOT NULL,
	"account_id" text NOT NULL,
	"kind" text NOT NULL,
	"payload_sealed" text NOT NULL,
	"raw_sealed" "bytea",
	"attempts" bigint DEFAULT 0 NOT NULL,
	"next_attempt_at" bigint NOT NULL,
	"set_aside_at" bigint,
	"last_error" text,
	"spool_id" text,
	"created_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "captured_messages" (
	"seq" bigint PRIMARY KEY GENERATED BY DEFAULT AS IDENTITY (sequence name "captured_messages_seq_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"email_id" text NOT NULL,
	"account_id" text NOT NULL,
	"recipient" text NOT NULL,
	"message_sealed" "bytea" NOT NULL,
	"created_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "dashboard_sessions" (
	"token_hash" text PRIMARY KEY NOT NULL,
	"csrf_token" text NOT NULL,
	"created_at" bigint NOT NULL,
	"last_seen_at" bigint NOT NULL,
	"flash" text
);
--> statement-breakpoint
CREATE TABLE "webhook_attempts" (
	"seq" bigint PRIMARY KEY GENERATED BY DEFAULT AS IDENTITY (sequence name "webhook_attempts_seq_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"delivery_id" text NOT NULL,
	"attempt" bigint NOT NULL,
	"attempted_at" bigint NOT NULL,
	"status" bigint,
	"error" text,
	"delivered" boolean NOT NULL
);
--> statement-breakpoint
CREATE TABLE "change_counters" (
	"name" text PRIMARY KEY NOT NULL,
	"n" bigint DEFAULT 0 NOT NULL
);
--> statement-breakpoint
CREATE TABLE "operator_messages" (
	"seq" bigint PRIMARY KEY GENERATED BY DEFAULT AS IDENTITY (sequence name "operator_messages_seq_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"id" text NOT NULL,
	"recipients" json NOT NULL,
	"mail_from" text NOT NULL,
	"from_header" text NOT NULL,
	"subject" text NOT NULL,
	"remote_address" text NOT NULL,
	"helo" text NOT NULL,
	"size" bigint NOT NULL,
	"truncated" boolean NOT NULL,
	"message_sealed" "bytea" NOT NULL,
	"received_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "templates" (
	"id" text PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"name" text NOT NULL,
	"kind" text NOT NULL,
	"version" bigint NOT NULL,
	"created_at" bigint NOT NULL,
	"updated_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "template_versions" (
	"template_id" text NOT NULL,
	"version" bigint NOT NULL,
	"subject" text,
	"html" text,
	"text" text,
	"layout" text,
	"variables" json NOT NULL,
	"created_at" bigint NOT NULL,
	CONSTRAINT "template_versions_template_id_version_pk" PRIMARY KEY("template_id","version")
);
--> statement-breakpoint
CREATE TABLE "submitted_messages" (
	"account_id" text NOT NULL,
	"message_id" text NOT NULL,
	"email_id" text NOT NULL,
	"created_at" bigint NOT NULL,
	CONSTRAINT "submitted_messages_account_id_message_id_pk" PRIMARY KEY("account_id","message_id")
);
--> statement-breakpoint
ALTER TABLE "accounts" ADD CONSTRAINT "accounts_parent_id_accounts_id_fk" FOREIGN KEY ("parent_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "api_keys" ADD CONSTRAINT "api_keys_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "domain_keys" ADD CONSTRAINT "domain_keys_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "domains" ADD CONSTRAINT "domains_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "domains" ADD CONSTRAINT "domains_key_id_domain_keys_id_fk" FOREIGN KEY ("key_id") REFERENCES "public"."domain_keys"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "emails" ADD CONSTRAINT "emails_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "email_events" ADD CONSTRAINT "email_events_email_id_emails_id_fk" FOREIGN KEY ("email_id") REFERENCES "public"."emails"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "outbound_messages" ADD CONSTRAINT "outbound_messages_id_emails_id_fk" FOREIGN KEY ("id") REFERENCES "public"."emails"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "outbound_messages" ADD CONSTRAINT "outbound_messages_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "outbound_messages" ADD CONSTRAINT "outbound_messages_domain_key_id_domain_keys_id_fk" FOREIGN KEY ("domain_key_id") REFERENCES "public"."domain_keys"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "outbound_recipients" ADD CONSTRAINT "outbound_recipients_message_id_outbound_messages_id_fk" FOREIGN KEY ("message_id") REFERENCES "public"."outbound_messages"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "idempotency_keys" ADD CONSTRAINT "idempotency_keys_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "suppressions" ADD CONSTRAINT "suppressions_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "webhook_endpoints" ADD CONSTRAINT "webhook_endpoints_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "webhook_deliveries" ADD CONSTRAINT "webhook_deliveries_endpoint_id_webhook_endpoints_id_fk" FOREIGN KEY ("endpoint_id") REFERENCES "public"."webhook_endpoints"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "webhook_deliveries" ADD CONSTRAINT "webhook_deliveries_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "customer_databases" ADD CONSTRAINT "customer_databases_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "customer_db_writes" ADD CONSTRAINT "customer_db_writes_database_account_id_accounts_id_fk" FOREIGN KEY ("database_account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "captured_messages" ADD CONSTRAINT "captured_messages_email_id_emails_id_fk" FOREIGN KEY ("email_id") REFERENCES "public"."emails"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "webhook_attempts" ADD CONSTRAINT "webhook_attempts_delivery_id_webhook_deliveries_id_fk" FOREIGN KEY ("delivery_id") REFERENCES "public"."webhook_deliveries"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "templates" ADD CONSTRAINT "templates_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "template_versions" ADD CONSTRAINT "template_versions_template_id_templates_id_fk" FOREIGN KEY ("template_id") REFERENCES "public"."templates"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "submitted_messages" ADD CONSTRAINT "submitted_messages_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "submitted_messages" ADD CONSTRAINT "submitted_messages_email_id_emails_id_fk" FOREIGN KEY ("email_id") REFERENCES "public"."emails"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "accounts_parent_idx" ON "accounts" USING btree ("parent_id","id");--> statement-breakpoint
CREATE UNIQUE INDEX "api_keys_hash_idx" ON "api_keys" USING btree ("key_hash");--> statement-breakpoint
CREATE INDEX "api_keys_account_idx" ON "api_keys" USING btree ("account_id","id");--> statement-breakpoint
CREATE UNIQUE INDEX "domain_keys_account_name_idx" ON "domain_keys" USING btree ("account_id","name");--> statement-breakpoint
CREATE UNIQUE INDEX "domains_account_name_idx" ON "domains" USING btree ("account_id","name");--> statement-breakpoint
CREATE INDEX "domains_name_idx" ON "domains" USING btree ("name");--> statement-breakpoint
CREATE INDEX "domains_account_idx" ON "domains" USING btree ("account_id","id");--> statement-breakpoint
CREATE INDEX "emails_account_idx" ON "emails" USING btree ("account_id","id");--> statement-breakpoint
CREATE INDEX "emails_account_status_idx" ON "emails" USING btree ("account_id","status","created_at");--> statement-breakpoint
CREATE INDEX "email_events_email_idx" ON "email_events" USING btree ("email_id","id");--> statement-breakpoint
CREATE INDEX "email_events_account_idx" ON "email_events" USING btree ("account_id","id");--> statement-breakpoint
CREATE INDEX "outbound_messages_domain_key_idx" ON "outbound_messages" USING btree ("domain_key_id");--> statement-breakpoint
CREATE INDEX "outbound_recipients_due_idx" ON "outbound_recipients" USING btree ("status","next_attempt_at");--> statement-breakpoint
CREATE INDEX "outbound_recipients_account_due_idx" ON "outbound_recipients" USING btree ("status","account_id","next_attempt_at","id");--> statement-breakpoint
CREATE INDEX "outbound_recipients_message_idx" ON "outbound_recipients" USING btree ("message_id");--> statement-breakpoint
CREATE UNIQUE INDEX "suppressions_account_address_idx" ON "suppressions" USING btree ("account_id","address");--> statement-breakpoint
CREATE INDEX "suppressions_account_idx" ON "suppressions" USING btree ("account_id","id");--> statement-breakpoint
CREATE INDEX "webhook_endpoints_account_idx" ON "webhook_endpoints" USING btree ("account_id","id");--> statement-breakpoint
CREATE INDEX "webhook_deliveries_endpoint_idx" ON "webhook_deliveries" USING btree ("endpoint_id","id");--> statement-breakpoint
CREATE INDEX "webhook_deliveries_due_idx" ON "webhook_deliveries" USING btree ("next_attempt_at","id");--> statement-breakpoint
CREATE INDEX "webhook_deliveries_pending_idx" ON "webhook_deliveries" USING btree ("endpoint_id","id") WHERE "webhook_deliveries"."next_attempt_at" is not null;--> statement-breakpoint
CREATE INDEX "customer_db_writes_pending_idx" ON "customer_db_writes" USING btree ("database_account_id","id") WHERE "customer_db_writes"."set_aside_at" is null;--> statement-breakpoint
CREATE INDEX "customer_db_writes_created_idx" ON "customer_db_writes" USING btree ("created_at");--> statement-breakpoint
CREATE INDEX "customer_db_writes_spool_idx" ON "customer_db_writes" USING btree ("spool_id") WHERE "customer_db_writes"."spool_id" is not null;--> statement-breakpoint
CREATE UNIQUE INDEX "captured_messages_recipient_idx" ON "captured_messages" USING btree ("email_id","recipient");--> statement-breakpoint
CREATE INDEX "dashboard_sessions_last_seen_idx" ON "dashboard_sessions" USING btree ("last_seen_at");--> statement-breakpoint
CREATE INDEX "webhook_attempts_delivery_idx" ON "webhook_attempts" USING btree ("delivery_id","attempt");--> statement-breakpoint
CREATE UNIQUE INDEX "operator_messages_id_idx" ON "operator_messages" USING btree ("id");--> statement-breakpoint
CREATE UNIQUE INDEX "templates_account_name_idx" ON "templates" USING btree ("account_id","name");--> statement-breakpoint
CREATE INDEX "submitted_messages_created_idx" ON "submitted_messages" USING btree ("created_at");