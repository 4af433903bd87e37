-- The key that signs list cursors (server/core/cursor-key.ts), made by the migration as on SQLite
-- (db/migrations/0016_cursor_key.sql): 32 bytes as 64 lower-case hex digits. Postgres has no randomblob() without the
-- pgcrypto extension, which a managed database may not let us create; gen_random_uuid() (core since Postgres 13)
-- draws from the server's strong random source, and SHA-256 of two of them (244 random bits) gives the 32 bytes.
INSERT INTO "settings" ("key", "value")
VALUES ('cursor_hmac_key', encode(sha256(convert_to(gen_random_uuid()::text || gen_random_uuid()::text, 'UTF8')), 'hex'))
ON CONFLICT ("key") DO NOTHING;
