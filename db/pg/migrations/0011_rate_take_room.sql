-- rate_take() counts a batch that has room without dropping anything: when every scope's stored hits (rate_counts.n,
-- those past their window included) with the batch's entries for it stay within its limit, every request of the batch
-- is counted whatever the window drops, so its hits go in at once: one insert, one count per scope. Only a batch that
-- may meet a limit takes 0008's way, request by request: drop the scope's hits past the window, count, refuse or
-- count. The hits past their window that a batch with room leaves are dropped by the next take that comes near the
-- limit or by the periodic sweep (server/core/rate-limit.ts), so a scope's count stays an upper bound of its window's
-- hits and the decision stays exact. Before, every request of a scope far from its limit (the common case) deleted,
-- recounted and updated its count row twice, in one statement per entry: the most expensive statement of three nodes.
CREATE OR REPLACE FUNCTION "rate_take"("reqs" integer[], "scopes" text[], "limits" bigint[], "windows" bigint[], "now" bigint, "durable" boolean)
RETURNS TABLE ("req" integer, "refused" integer, "retry_ms" bigint)
LANGUAGE plpgsql AS $$
DECLARE
  s text;
  entries integer := coalesce(array_length(reqs, 1), 0);
  first integer := 1;
  last integer;
  i integer;
  dropped bigint;
  held bigint;
  oldest bigint;
BEGIN
  IF NOT durable THEN
    PERFORM set_config('synchronous_commit', 'off', true);
  END IF;
  FOR s IN SELECT DISTINCT x FROM unnest(scopes) AS x ORDER BY x LOOP
    PERFORM pg_advisory_xact_lock(hashtext('rate_hits'), hashtext(s));
  END LOOP;
  -- Room for the whole batch in every scope: every request counted, none refused (a row each, as below).
  IF NOT EXISTS (
    SELECT 1
    FROM (SELECT x AS "scope", count(*) AS k, min(l) AS lim FROM unnest(scopes, limits) AS u(x, l) GROUP BY x) b
    LEFT JOIN "rate_counts" c ON c."scope" = b."scope"
    WHERE coalesce(c."n", 0) + b.k > b.lim
  ) THEN
    WITH put AS (INSERT INTO "rate_hits" ("scope", "at") SELECT x, now FROM unnest(scopes) AS x RETURNING "scope")
    INSERT INTO "rate_counts" AS c ("scope", "n") SELECT "scope", count(*) FROM put GROUP BY "scope"
      ON CONFLICT ("scope") DO UPDATE SET "n" = c."n" + excluded."n";
    RETURN QUERY SELECT r, 0, 0::bigint FROM (SELECT DISTINCT r FROM unnest(reqs) AS r) d ORDER BY r;
    RETURN;
  END IF;
  WHILE first <= entries LOOP
    last := first;
    WHILE last < entries AND reqs[last + 1] = reqs[first] LOOP
      last := last + 1;
    END LOOP;
    req := reqs[first];
    refused := 0;
    retry_ms := 0;
    FOR i IN first .. last LOOP
      WITH gone AS (DELETE FROM "rate_hits" WHERE "scope" = scopes[i] AND "at" <= now - windows[i] RETURNING 1)
      SELECT count(*) INTO dropped FROM gone;
      INSERT INTO "rate_counts" AS c ("scope", "n") VALUES (scopes[i], 0)
        ON CONFLICT ("scope") DO UPDATE SET "n" = greatest(c."n" - dropped, 0)
        RETURNING c."n" INTO held;
      IF held >= limits[i] THEN
        SELECT min("at") INTO oldest FROM "rate_hits" WHERE "scope" = scopes[i];
        refused := i - first + 1;
        retry_ms := oldest + windows[i] - now;
        EXIT;
      END IF;
    END LOOP;
    IF refused = 0 THEN
      INSERT INTO "rate_hits" ("scope", "at") SELECT x, now FROM unnest(scopes[first:last]) AS x;
      UPDATE "rate_counts" SET "n" = "n" + 1 WHERE "scope" = ANY(scopes[first:last]);
    END IF;
    RETURN NEXT;
    first := last + 1;
  END LOOP;
END;
$$;
