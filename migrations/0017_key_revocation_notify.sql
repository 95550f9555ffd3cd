-- 0017_key_revocation_notify: every server hears when an API key stops being valid.
--
-- Each server caches the keys that authenticated (key_cache_ttl_s, rpc_cache.c). Until now
-- a revocation dropped the key only from the cache of the replica that served
-- RevokeApiKey; the others accepted it until their entry expired. Now a trigger announces,
-- on the channel cg_keys, every change that can make a cached key entry wrong: revoked_at
-- going from NULL to a time, a changed secret_hash, tenant_id or key_id, and a deleted key;
-- whatever the path (RevokeApiKey, ctxguardctl, plain SQL). Each server LISTENs on cg_keys
-- on its events connection (store_pg_events.c) and drops the key from its process cache.
--
-- Payload: '<tenant uuid>:<key_id>' (key_id matches api_keys_key_id_format), or '*' after a
-- TRUNCATE (every key of every tenant). NOTIFY is transactional: it is delivered at commit,
-- and not at all on rollback, so a server never drops a key for a revocation that did not
-- happen, nor hears of it before a lookup could see it. A NOTIFY takes the database-wide
-- notify lock at commit (see 0007); revocations are rare, so unlike per-write events this
-- costs the write path nothing.
--
-- Not announced: un-revoking (revoked_at back to NULL; a cache that still says revoked only
-- refuses), the name, and a coming expires_at column: expiry is compared with the clock at
-- authentication time, so a cached entry that carries expires_at needs no notification.
-- The migration that adds expires_at must add it to the condition below only if it allows
-- moving expires_at earlier (a cached entry would keep the later time until its TTL).
CREATE FUNCTION cg_keys_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_notify('cg_keys', '*');
        RETURN NULL;
    END IF;
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('cg_keys', OLD.tenant_id::text || ':' || OLD.key_id);
        RETURN NULL;
    END IF;
    IF (OLD.revoked_at IS NULL AND NEW.revoked_at IS NOT NULL)
       OR OLD.secret_hash IS DISTINCT FROM NEW.secret_hash
       OR OLD.tenant_id IS DISTINCT FROM NEW.tenant_id
       OR OLD.key_id IS DISTINCT FROM NEW.key_id THEN
        PERFORM pg_notify('cg_keys', OLD.tenant_id::text || ':' || OLD.key_id);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER api_keys_notify_change
    AFTER UPDATE OR DELETE ON api_keys
    FOR EACH ROW EXECUTE FUNCTION cg_keys_notify();

CREATE TRIGGER api_keys_notify_truncate
    AFTER TRUNCATE ON api_keys
    FOR EACH STATEMENT EXECUTE FUNCTION cg_keys_notify();
