-- The key that signs list cursors (server/core/cursor-key.ts), made here, once, instead of on a list's first use: a
-- read never writes, so a list answers on a full disk too (decisions.md section 13). 32 bytes from SQLite's
-- randomness (seeded from the system's); a database that already holds one keeps it, and the cursors it signed.
INSERT INTO `settings` (`key`, `value`) VALUES ('cursor_hmac_key', lower(hex(randomblob(32)))) ON CONFLICT (`key`) DO NOTHING;
