-- 0010_context_state: what stateful Compress keeps per session (ContextService): the trim
-- boundary and history revision, the original messages (GetHistory), and the tool results
-- that offload stored whole (GetArtifact / ListArtifacts). Every key starts with tenant_id.
--
-- A history message is a ctxguard.v1.Message in protobuf encoding (lossless for everything
-- the conversation model carries) with its SHA-256, so that a FULL sync finds the first
-- message that differs without reading the messages back. A new revision (the caller's
-- conversation diverged from the stored one) holds the whole conversation again; the old
-- revision stays readable.

CREATE TABLE context_sessions (
    tenant_id        uuid        NOT NULL REFERENCES tenants (tenant_id),
    session_id       text        NOT NULL,
    trim_boundary    bigint      NOT NULL DEFAULT 0 CHECK (trim_boundary >= 0),
    revision         integer     NOT NULL DEFAULT 1 CHECK (revision >= 1),
    history_messages bigint      NOT NULL DEFAULT 0 CHECK (history_messages >= 0),
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, session_id)
);

CREATE TABLE context_history (
    tenant_id     uuid        NOT NULL,
    session_id    text        NOT NULL,
    revision      integer     NOT NULL,
    position      bigint      NOT NULL CHECK (position >= 0),
    message       bytea       NOT NULL,
    digest        bytea       NOT NULL,
    tokens        bigint      NOT NULL,
    compaction_id text        NOT NULL,
    received_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, session_id, revision, position),
    FOREIGN KEY (tenant_id, session_id) REFERENCES context_sessions ON DELETE CASCADE
);

CREATE TABLE context_artifacts (
    tenant_id        uuid        NOT NULL,
    artifact_id      text        NOT NULL,
    session_id       text        NOT NULL,
    seq              bigserial   NOT NULL,
    compaction_id    text        NOT NULL,
    source_index     bigint      NOT NULL,
    history_position bigint      NOT NULL,
    tool_call_id     text        NOT NULL,
    tool_name        text        NOT NULL,
    media_type       text        NOT NULL,
    size_chars       bigint      NOT NULL,
    tokens           bigint      NOT NULL,
    sha256           text        NOT NULL,
    preview_bytes    bigint      NOT NULL,
    content          bytea       NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, artifact_id),
    FOREIGN KEY (tenant_id, session_id) REFERENCES context_sessions ON DELETE CASCADE
);

CREATE INDEX context_artifacts_by_session ON context_artifacts (tenant_id, session_id, seq);

-- One row per stateful Compress (dry runs excluded), for GetCompressionStats: the report's
-- totals and, per layer run (in order, escalation passes repeated), its layer, outcome,
-- tokens saved, messages affected and time.
CREATE TABLE context_compactions (
    tenant_id                uuid        NOT NULL,
    session_id               text        NOT NULL,
    compaction_id            text        NOT NULL,
    strategy                 smallint    NOT NULL,
    triggered                boolean     NOT NULL,
    tokens_before            bigint      NOT NULL,
    tokens_after             bigint      NOT NULL,
    boundary_moved           boolean     NOT NULL,
    cache_tokens_invalidated bigint      NOT NULL,
    artifacts                integer     NOT NULL,
    artifact_bytes           bigint      NOT NULL,
    layer                    integer[]   NOT NULL,
    layer_outcome            integer[]   NOT NULL,
    layer_saved              bigint[]    NOT NULL,
    layer_affected           bigint[]    NOT NULL,
    layer_ms                 bigint[]    NOT NULL,
    created_at               timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, compaction_id),
    FOREIGN KEY (tenant_id, session_id) REFERENCES context_sessions ON DELETE CASCADE
);

CREATE INDEX context_compactions_by_session ON context_compactions (tenant_id, session_id, created_at);
