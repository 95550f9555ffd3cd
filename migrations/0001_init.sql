-- 0001_init: tenants and their hashed API keys.
--
-- Applied by the migration runner (server/store/store_pg.c) inside one transaction,
-- together with its schema_migrations row, so no transaction control here.
-- Table names are unqualified: the connection's search_path picks the schema.
--
-- Every key and index starts with tenant_id (DESIGN.md section 5) so that the schema
-- can be distributed by tenant on Citus without changes.

CREATE TABLE tenants (
    tenant_id  uuid        NOT NULL DEFAULT gen_random_uuid(),
    name       text        NOT NULL,
    time_zone  text        NOT NULL DEFAULT 'UTC',
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id),
    CONSTRAINT tenants_name_length CHECK (char_length(name) BETWEEN 1 AND 200),
    CONSTRAINT tenants_time_zone_length CHECK (char_length(time_zone) BETWEEN 1 AND 64)
);

-- Only the SHA-256 of a key's secret is kept; the secret itself is never stored.
CREATE TABLE api_keys (
    tenant_id   uuid        NOT NULL REFERENCES tenants (tenant_id),
    key_id      text        NOT NULL,
    secret_hash bytea       NOT NULL,
    name        text        NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz NULL,
    PRIMARY KEY (tenant_id, key_id),
    CONSTRAINT api_keys_key_id_format CHECK (key_id ~ '^[A-Za-z0-9_-]{1,16}$'),
    CONSTRAINT api_keys_secret_hash_length CHECK (octet_length(secret_hash) = 32),
    CONSTRAINT api_keys_name_length CHECK (char_length(name) <= 200),
    CONSTRAINT api_keys_revoked_after_created CHECK (revoked_at IS NULL OR revoked_at >= created_at)
);
