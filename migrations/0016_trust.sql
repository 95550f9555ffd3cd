-- 0016_trust: roles, scope binding and expiry of API keys; the audit trail; the per-call
-- token bound of a tenant.
--
-- Applied by the migration runner (server/store/store_pg.c) inside one transaction,
-- together with its schema_migrations row, so no transaction control here.
-- Table names are unqualified: the connection's search_path picks the schema.
-- Every key and index starts with tenant_id (DESIGN.md section 5).

-- role: 1 agent, 2 viewer, 3 operator, 4 admin (the tenant's administrator); the numbers
-- are admin.proto's ApiKeyRole. Keys that exist before this migration could do everything
-- inside their tenant, so they become tenant admins (nothing that works today stops
-- working); new keys default to agent, the least privilege.
-- scope_session_id / scope_task_id: the subtree the key is bound to ('' = the whole
-- tenant; a task needs its session). expires_at: NULL never. last_used_at: refreshed at
-- most once a minute per key and replica. created_by_key_id: '' for the server's admin key.
ALTER TABLE api_keys
    ADD COLUMN role              smallint    NOT NULL DEFAULT 4,
    ADD COLUMN scope_session_id  text        NOT NULL DEFAULT '',
    ADD COLUMN scope_task_id     text        NOT NULL DEFAULT '',
    ADD COLUMN expires_at        timestamptz NULL,
    ADD COLUMN last_used_at      timestamptz NULL,
    ADD COLUMN created_by_key_id text        NOT NULL DEFAULT '',
    ADD CONSTRAINT api_keys_role CHECK (role BETWEEN 1 AND 4),
    ADD CONSTRAINT api_keys_scope CHECK (scope_task_id = '' OR scope_session_id <> ''),
    ADD CONSTRAINT api_keys_scope_length
        CHECK (octet_length(scope_session_id) <= 128 AND octet_length(scope_task_id) <= 128),
    ADD CONSTRAINT api_keys_expires_after_created
        CHECK (expires_at IS NULL OR expires_at > created_at);
ALTER TABLE api_keys ALTER COLUMN role SET DEFAULT 1;

-- The largest number of tokens one Commit or RecordUsage may record (admin.proto
-- TenantSettings.max_call_tokens).
ALTER TABLE tenants
    ADD COLUMN max_call_tokens bigint NOT NULL DEFAULT 10000000,
    ADD CONSTRAINT tenants_max_call_tokens CHECK (max_call_tokens BETWEEN 1 AND 100000000);

-- One row per privileged change (admin.proto AuditEvent): who (actor_key_id, '' for the
-- server's admin key, and its role: 0 server admin, else ApiKeyRole), when, what (kind,
-- the scope and the target: a key id, an approval id), the state before and after as
-- JSON, and the request id. Written in the transaction of the change it records.
-- Append-only: the trigger below refuses UPDATE and DELETE.
CREATE TABLE audit_events (
    tenant_id    uuid        NOT NULL,
    audit_id     bigint      GENERATED ALWAYS AS IDENTITY,
    at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    actor_key_id text        NOT NULL,
    actor_role   smallint    NOT NULL,
    kind         text        NOT NULL,
    session_id   text        NOT NULL DEFAULT '',
    task_id      text        NOT NULL DEFAULT '',
    agent_id     text        NOT NULL DEFAULT '',
    target       text        NOT NULL DEFAULT '',
    before       jsonb       NULL,
    after        jsonb       NULL,
    request_id   text        NOT NULL DEFAULT '',
    PRIMARY KEY (tenant_id, audit_id),
    CONSTRAINT audit_events_role CHECK (actor_role BETWEEN 0 AND 4),
    CONSTRAINT audit_events_kind CHECK (kind ~ '^[a-z_]{1,40}$')
);
CREATE INDEX audit_events_at ON audit_events (tenant_id, at, audit_id);

CREATE FUNCTION audit_events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_events is append-only (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;

CREATE TRIGGER audit_events_append_only
    BEFORE UPDATE OR DELETE ON audit_events
    FOR EACH ROW EXECUTE FUNCTION audit_events_append_only();
CREATE TRIGGER audit_events_no_truncate
    BEFORE TRUNCATE ON audit_events
    FOR EACH STATEMENT EXECUTE FUNCTION audit_events_append_only();
