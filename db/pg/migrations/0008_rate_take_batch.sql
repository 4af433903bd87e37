-- rate_take() takes a node's requests in a batch, in order, and can commit without waiting for the WAL flush.
--
-- A batch: `reqs` numbers each entry's request, the entries of one request adjacent and the requests in the order they
-- are taken; `scopes`, `limits`, `windows` are the entries' (a request's scopes in its order). Every scope of the batch
-- is locked first, in one order for every batch (sorted), so two nodes' batches never wait on each other in a cycle.
-- Then each request in turn, as 0007's take did: counted in each of its scopes, or refused by the first at its limit
-- (its position in the request, from 1) and when it has room again; a request sees the ones before it in the batch.
-- One row a request.
--
-- `durable` false (a take that is a transaction of its own) turns synchronous_commit off for its transaction alone:
-- the scopes' locks are held until the commit, and with a flush each, every request of a busy key (every API request
-- from it, across all nodes) waited in line for the disk. What an asynchronous commit can lose is the last moments of
-- hits at a crash of Postgres: a key may then send that many more requests in the minute after it.
DROP FUNCTION "rate_take"(text[], bigint[], bigint[], bigint);
--> statement-breakpoint
CREATE FUNCTION "rate_take"("reqs" integer[], "scopes" text[], "limits" bigint[], "windows" bigint[], "now" bigint, "durable" boolean)
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
