-- 0019_context_session_version: a counter that moves on every save of a session, for the
-- revision check of stateful Compress (server/service/context_session.c).
--
-- A stateful Compress reads the session in one short transaction, runs the cascade (and any
-- LLM summary) with no transaction open, then saves in a second short transaction that
-- locks the row and compares this counter with the value it read: another call that saved
-- in between moved it, and the call reloads and runs again. A new row starts at 0.

ALTER TABLE context_sessions ADD COLUMN version bigint NOT NULL DEFAULT 0;
