-- 0021_window_use: each compaction record keeps the window its call worked in (the model's
-- context window, and the effective window: that less the reserved output and the tokens sent
-- beside the conversation), so that GetCompressionStats can tell how full a session's window
-- is now (the latest record's tokens_after over its effective window). 0: recorded before
-- this migration (unknown).

ALTER TABLE context_compactions
    ADD COLUMN context_window bigint NOT NULL DEFAULT 0,
    ADD COLUMN effective_window bigint NOT NULL DEFAULT 0;
