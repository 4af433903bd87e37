CREATE TABLE "rate_counts" (
	"scope" text PRIMARY KEY NOT NULL,
	"n" bigint NOT NULL
);
--> statement-breakpoint
-- rate_take() without counting a window's rows (0005's counted them all on every request: with raised limits, a
-- minute of every hit): each scope's hits are counted in rate_counts, lowered by the hits its take drops past the
-- window and raised by the hit it counts. Hits already stored are counted once here.
INSERT INTO "rate_counts" ("scope", "n") SELECT "scope", count(*) FROM "rate_hits" GROUP BY "scope";
--> statement-breakpoint
CREATE OR REPLACE FUNCTION "rate_take"("scopes" text[], "limits" bigint[], "windows" bigint[], "now" bigint, OUT "refused" integer, OUT "retry_ms" bigint)
LANGUAGE plpgsql AS $$
DECLARE
  i integer;
  dropped bigint;
  held bigint;
  oldest bigint;
BEGIN
  refused := 0;
  retry_ms := 0;
  FOR i IN 1 .. coalesce(array_length(scopes, 1), 0) LOOP
    PERFORM pg_advisory_xact_lock(hashtext('rate_hits'), hashtext(scopes[i]));
  END LOOP;
  FOR i IN 1 .. coalesce(array_length(scopes, 1), 0) LOOP
    WITH gone AS (DELETE FROM "rate_hits" WHERE "scope" = scopes[i] AND "at" <= now - windows[i] RETURNING 1)
    SELECT count(*) INTO dropped FROM gone;
    INSERT INTO "rate_counts" AS c ("scope", "n") VALUES (scopes[i], 0)
      ON CONFLICT ("scope") DO UPDATE SET "n" = greatest(c."n" - dropped, 0)
      RETURNING c."n" INTO held;
    IF held >= limits[i] THEN
      SELECT min("at") INTO oldest FROM "rate_hits" WHERE "scope" = scopes[i];
      refused := i;
      retry_ms := oldest + windows[i] - now;
      RETURN;
    END IF;
  END LOOP;
  INSERT INTO "rate_hits" ("scope", "at") SELECT s, now FROM unnest(scopes) AS s;
  UPDATE "rate_counts" SET "n" = "n" + 1 WHERE "scope" = ANY(scopes);
END;
$$;
