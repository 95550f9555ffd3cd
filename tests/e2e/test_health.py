"""grpc.health.v1.Health from an external client: Check, Watch, PostgreSQL loss, draining."""

import signal
import time

import grpc

import cgtest
from cgtest import health


class HealthCheck(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls)
        cls.ch = cls.srv.channel()

    def test_overall_status_is_serving(self):
        r = cgtest.health_check(self.ch)
        self.assertEqual(health.name(r.status), "SERVING")

    def test_each_service_is_serving(self):
        for svc in ("ctxguard.v1.AdminService", "ctxguard.v1.BudgetService",
                    "ctxguard.v1.ContextService"):
            with self.subTest(service=svc):
                r = cgtest.health_check(self.ch, svc)
                self.assertEqual(health.name(r.status), "SERVING")

    def test_unknown_service_is_not_found(self):
        self.assertRpcError(grpc.StatusCode.NOT_FOUND, cgtest.health_check, self.ch,
                            "ctxguard.v1.NoSuchService")

    def test_watch_delivers_serving_first(self):
        it = cgtest.health_watch(self.ch, timeout=10)
        first = next(it)
        it.cancel()
        self.assertEqual(health.name(first.status), "SERVING")

    def test_watch_of_unknown_service_reports_service_unknown(self):
        # The health protocol: Watch does not fail for an unknown service, it answers
        # SERVICE_UNKNOWN (and keeps watching).
        it = cgtest.health_watch(self.ch, "ctxguard.v1.NoSuchService", timeout=10)
        try:
            first = next(it)
        finally:
            it.cancel()
        self.assertEqual(health.name(first.status), "SERVICE_UNKNOWN")


class HealthFollowsPostgres(cgtest.TestCase):
    """NOT_SERVING while PostgreSQL is unreachable, SERVING again when it returns. The
    shared PostgreSQL stays up: the server reaches it through a proxy this test cuts."""

    def test_not_serving_while_postgres_is_unreachable(self):
        host, port = cgtest.dsn_host_port(cgtest.pg_dsn())
        proxy = cgtest.TcpProxy(host, port)
        self.addCleanup(proxy.close)
        dsn = cgtest.dsn_with_host_port(cgtest.pg_dsn(), "127.0.0.1", proxy.port)
        srv = cgtest.start_server(self, pg=dsn, env={
            "CTXGUARD_HEALTH_INTERVAL_MS": "100",
            "CTXGUARD_PG_CONNECT_TIMEOUT_MS": "500",
        })
        ch = srv.channel()
        watch = cgtest.WatchRecorder(ch, timeout=60)
        self.addCleanup(watch.cancel)
        watch.expect(health.SERVING, 10)

        proxy.cut()
        watch.expect(health.NOT_SERVING, 10)
        self.assertEqual(health.name(cgtest.health_check(ch).status), "NOT_SERVING")
        r = cgtest.health_check(ch, "ctxguard.v1.AdminService")
        self.assertEqual(health.name(r.status), "NOT_SERVING")
        # The admin API needs PostgreSQL: it must say so, not pretend.
        err = cgtest.rpc_error(srv.admin(ch).ListTenants, cgtest.admin_pb2.ListTenantsRequest(),
                               metadata=srv.admin_md(), timeout=10)
        self.assertEqual(err.code(), grpc.StatusCode.UNAVAILABLE,
                         f"ListTenants without PostgreSQL: {err.code().name} {err.details()!r}")

        proxy.restore()
        watch.expect(health.SERVING, 15)
        self.assertEqual(health.name(cgtest.health_check(ch).status), "SERVING")
        tenants = srv.admin(ch).ListTenants(cgtest.admin_pb2.ListTenantsRequest(),
                                            metadata=srv.admin_md(), timeout=10)
        self.assertIsNotNone(tenants)
        self.assertRegex(srv.log_text(), r"mod=health .*NOT_SERVING",
                         "the log should say when health changed")


class HealthWhileDraining(cgtest.TestCase):
    def test_sigterm_makes_watch_deliver_not_serving_and_end(self):
        srv = cgtest.start_server(self)
        ch = srv.channel()
        watch = cgtest.WatchRecorder(ch, timeout=60)
        self.addCleanup(watch.cancel)
        watch.expect(health.SERVING, 10)

        t0 = time.monotonic()
        srv.signal(signal.SIGTERM)
        watch.expect(health.NOT_SERVING, 10)
        end = watch.expect_end(10)
        ended_after = time.monotonic() - t0
        srv.close_channels()
        rc = srv.wait_exit(10)
        self.assertEqual(rc, 0, f"exit status after SIGTERM:\n{cgtest.tail(srv.log_text())}")
        # A watch is not an in-flight call that holds shutdown for the whole grace period.
        self.assertLess(ended_after, 4.0, f"Watch ended {ended_after:.2f} s after SIGTERM "
                        f"(grace 5 s), end: {cgtest._describe(end)}")


if __name__ == "__main__":
    import unittest
    unittest.main()
