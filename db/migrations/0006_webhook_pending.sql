CREATE INDEX `webhook_deliveries_pending_idx` ON `webhook_deliveries` (`endpoint_id`,`id`) WHERE `next_attempt_at` IS NOT NULL;
