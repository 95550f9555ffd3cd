"""A revoked API key is refused by every replica (migrations/0017_key_revocation_notify.sql,
server/service/watch.c, server/service/cache.c): two server processes on one database
schema and one Redis; the key is cached on B and revoked through A (or by SQL). With the
cg_keys notification B refuses it within a second; with the trigger silenced B accepts
it until its key_cache_ttl_s runs out, and then refuses it; a Redis entry left valid (a
revoking replica whose Redis write was lost) does not bring it back on B."""

import time
import unittest

import grpc

import cgtest
from cgtest import admin_pb2
from test_cache import redis_cli

UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED
POLL_S = 0.02
PROPAGATION_BOUND_S = 1.0
SHORT_TTL_S = 2
TTL_MARGIN_S = 1.0


def whoami(srv, md):
    """None when srv accepts the key, else the RpcError."""
    try:
        srv.admin().WhoAmI(admin_pb2.WhoAmIRequest(), metadata=md, timeout=10)
        return None
    except grpc.RpcError as err:
        return err


def key_of(srv):
    """A new tenant and one of its keys: (tenant_id, key_id, metadata)."""
    t = srv.create_tenant()
    k = srv.create_key(t.tenant_id)
    return t.tenant_id, k.key.key_id, cgtest.bearer(k.secret)


def wait_refused(testcase, srv, md, bound_s, since, what):
    """Polls srv every POLL_S until it refuses md; fails past since + bound_s. Returns the
    delay from since, in seconds."""
    deadline = since + bound_s
    while True:
        # A call sent before the deadline may be answered after it on a loaded machine: an
        # acceptance counts against the bound by when the call was sent.
        sent = time.monotonic()
        err = whoami(srv, md)
        now = time.monotonic()
        if err is not None:
            testcase.assertEqual(err.code(), UNAUTHENTICATED, f"{what}: {err.details()!r}")
            testcase.assertIn("revoked", err.details() or "", what)
            return now - since
        if sent > deadline:
            testcase.fail(f"{what}: still accepted {sent - since:.3f} s after the revocation"
                          f" (bound {bound_s:.3f} s; answered {now - sent:.3f} s later)")
        time.sleep(POLL_S)


class Revocation(cgtest.TestCase):

    def replicas(self, env=None):
        a = cgtest.start_server(self, env=env)
        b = cgtest.start_server(self, schema=a.schema, env=env)
        return a, b

    def revoke_rpc(self, srv, tenant_id, key_id):
        srv.admin().RevokeApiKey(admin_pb2.RevokeApiKeyRequest(tenant_id=tenant_id,
                                                               key_id=key_id),
                                 metadata=srv.admin_md(), timeout=10)

    def test_revoked_through_a_is_refused_by_b_within_a_second(self):
        a, b = self.replicas()
        tenant_id, key_id, md = key_of(a)
        for _ in range(3):  # cached on B (and in Redis)
            self.assertIsNone(whoami(b, md))
        before = time.monotonic()
        self.revoke_rpc(a, tenant_id, key_id)
        revoked = time.monotonic()
        delay = wait_refused(self, b, md, PROPAGATION_BOUND_S, revoked, "B after A's revoke")
        print(f"propagation: B refused {delay * 1000:.1f} ms after RevokeApiKey returned"
              f" ({(revoked - before) * 1000:.1f} ms in the call)")
        # And it stays refused: nothing (Redis, a racing fill) brings it back.
        for _ in range(10):
            err = whoami(b, md)
            self.assertIsNotNone(err, "B accepted the key again")
            self.assertEqual(err.code(), UNAUTHENTICATED)

    def test_revoked_by_sql_is_refused_by_b_within_a_second(self):
        a, b = self.replicas()
        tenant_id, key_id, md = key_of(a)
        self.assertIsNone(whoami(b, md))
        self.assertIsNone(whoami(a, md))
        cgtest.psql(f"UPDATE api_keys SET revoked_at = now() WHERE tenant_id = '{tenant_id}'"
                    f" AND key_id = '{key_id}'", dsn=a.dsn)
        revoked = time.monotonic()
        for srv, name in ((a, "A"), (b, "B")):
            delay = wait_refused(self, srv, md, PROPAGATION_BOUND_S, revoked,
                                 f"{name} after an UPDATE by SQL")
            print(f"propagation: {name} refused {delay * 1000:.1f} ms after the UPDATE")

    def stale_redis_case(self, cached_on):
        """The key used on cached_on ("a" or "b"), revoked through A, then its Redis entry
        set back to valid (the revoking replica's Redis write lost): B must refuse it within
        the bound all the same, since the notification makes it read PostgreSQL."""
        a, b = self.replicas()
        tenant_id, key_id, md = key_of(a)
        self.assertIsNone(whoami(a if cached_on == "a" else b, md))
        rkey = f"cg:{{{tenant_id}}}:key:{key_id}"
        url = cgtest.redis_url()
        self.assertEqual(redis_cli(url, "HGET", rkey, "revoked").strip(), "0")
        self.revoke_rpc(a, tenant_id, key_id)
        revoked = time.monotonic()
        self.assertEqual(redis_cli(url, "HGET", rkey, "revoked").strip(), "1",
                         "RevokeApiKey marks the Redis entry revoked")
        redis_cli(url, "HSET", rkey, "revoked", "0")
        delay = wait_refused(self, b, md, PROPAGATION_BOUND_S, revoked,
                             f"B (key used on {cached_on.upper()}), Redis saying valid")
        print(f"propagation, stale Redis, key used on {cached_on.upper()}: B refused"
              f" {delay * 1000:.1f} ms after RevokeApiKey returned")
        self.assertEqual(redis_cli(url, "HGET", rkey, "revoked").strip(), "1",
                         "B's read of PostgreSQL rewrote the Redis entry")

    def test_a_valid_redis_entry_does_not_revive_the_key(self):
        self.stale_redis_case("b")

    def test_a_valid_redis_entry_does_not_admit_it_on_a_replica_that_never_cached_it(self):
        self.stale_redis_case("a")

    def test_without_the_notification_the_ttl_bounds_it(self):
        # The trigger silenced (session_replication_role = replica skips ordinary
        # triggers): only key_cache_ttl_s stops B, which proves the notification is what
        # makes the cases above fast. Only B uses the key, so its Redis entry (written by
        # B's lookup) expires with B's own entry.
        a, b = self.replicas(env={"CTXGUARD_KEY_CACHE_TTL_S": str(SHORT_TTL_S)})
        tenant_id, key_id, md = key_of(a)
        self.assertIsNone(whoami(b, md))
        filled = time.monotonic()
        cgtest.psql("SET session_replication_role = replica; "
                    f"UPDATE api_keys SET revoked_at = now() WHERE tenant_id = '{tenant_id}'"
                    f" AND key_id = '{key_id}'", dsn=a.dsn)
        revoked = time.monotonic()
        err = whoami(b, md)
        self.assertIsNone(err, f"B refused the key {time.monotonic() - filled:.3f} s after"
                               f" caching it, without a notification: {err}")
        # Refused within the TTL of B's fill (its process entry, then its Redis entry).
        delay = wait_refused(self, b, md, SHORT_TTL_S + TTL_MARGIN_S, filled,
                             "B without a notification")
        print(f"fallback: B refused {delay * 1000:.1f} ms after its fill"
              f" ({(time.monotonic() - revoked) * 1000:.1f} ms after the UPDATE),"
              f" key_cache_ttl_s {SHORT_TTL_S}")
        self.assertGreaterEqual(delay, SHORT_TTL_S * 0.9,
                                "refused before its TTL: something else announced it")


if __name__ == "__main__":
    unittest.main()
