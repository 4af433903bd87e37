CREATE TABLE "rate_hits" (
	"scope" text NOT NULL,
	"at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "inbound_spool_records" (
	"spool_id" text NOT NULL,
	"seq" bigint NOT NULL,
	"record" "bytea" NOT NULL,
	"created_at" bigint NOT NULL,
	CONSTRAINT "inbound_spool_records_spool_id_seq_pk" PRIMARY KEY("spool_id","seq")
);
--> statement-breakpoint
ALTER TABLE "idempotency_keys" ADD COLUMN "held_by" text;--> statement-breakpoint
ALTER TABLE "dashboard_sessions" ADD COLUMN "flash_secret_sealed" "bytea";--> statement-breakpoint
ALTER TABLE "dashboard_sessions" ADD COLUMN "flash_secret_until" bigint;--> statement-breakpoint
CREATE INDEX "rate_hits_scope_idx" ON "rate_hits" USING btree ("scope","at");--> statement-breakpoint
-- The rate limits across nodes (server/core/rate-limit.ts, dashboard/security.ts): one statement takes a request
-- against every scope it counts in (a key and its account; a sign-in's client address), exactly, whichever node
-- serves it. The scopes are locked in the order given (every caller gives a key before its account), their hits older
-- than their window dropped and counted; over a limit, nothing is counted and the answer names the first scope over
-- it (1-based) and the milliseconds until its oldest hit leaves the window; else one hit is counted in each scope.
CREATE FUNCTION "rate_take"("scopes" text[], "limits" bigint[], "windows" bigint[], "now" bigint, OUT "refused" integer, OUT "retry_ms" bigint)
LANGUAGE plpgsql AS $$
DECLARE
  i integer;
  n bigint;
  oldest bigint;
BEGIN
  refused := 0;
  retry_ms := 0;
  FOR i IN 1 .. coalesce(array_length(scopes, 1), 0) LOOP
    PERFORM pg_advisory_xact_lock(hashtext('rate_hits'), hashtext(scopes[i]));
  END LOOP;
  FOR i IN 1 .. coalesce(array_length(scopes, 1), 0) LOOP
    DELETE FROM "rate_hits" WHERE "scope" = scopes[i] AND "at" <= now - windows[i];
    SELECT count(*), min("at") INTO n, oldest FROM "rate_hits" WHERE "scope" = scopes[i];
    IF n >= limits[i] THEN
      refused := i;
      retry_ms := oldest + windows[i] - now;
      RETURN;
    END IF;
  END LOOP;
  INSERT INTO "rate_hits" ("scope", "at") SELECT s, now FROM unnest(scopes) AS s;
END;
$$;
