"""The HTTP listener beside gRPC (http_listen): /healthz, /readyz, /metrics in Prometheus text
format 0.0.4 with the gRPC server metrics; promtool accepts the exposition and a real
Prometheus scrapes it; HTTPS with http_tls_cert/http_tls_key; off by default."""

import http.client
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import unittest
import urllib.parse
import uuid

import grpc

import cgtest
from cgtest import budget_pb2, budget_pb2_grpc, common_pb2

B = budget_pb2
CHECK_LABELS = 'grpc_type="unary",grpc_service="ctxguard.v1.BudgetService",grpc_method="CheckBudget"'


def http_port(srv, timeout=10):
    """The HTTP listener's port from the server's "http listening" line."""
    line = srv.err.wait_for(lambda l: 'msg="http listening"' in l, timeout)
    if line is None:
        raise AssertionError(f"no 'http listening' line; stderr:\n{cgtest.tail(srv.log_text())}")
    return int(re.search(r"\bport=(\d+)", line).group(1))


def get(port, path, method="GET", tls_context=None, timeout=10):
    """(status, headers dict with lower-case names, body text)."""
    if tls_context is None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    else:
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout, context=tls_context)
    try:
        conn.request(method, path)
        r = conn.getresponse()
        body = r.read().decode()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, body
    finally:
        conn.close()


def sample(text, name, labels):
    """The value of the sample `name{labels}` in an exposition, or None."""
    m = re.search(r"^" + re.escape(name + "{" + labels + "}") + r" (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HttpEndpoints(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls, env={"CTXGUARD_HTTP_LISTEN": "127.0.0.1:0"})
        cls.port = http_port(cls.srv)
        # Calls the metrics must show: N good CheckBudget calls, M refused ones.
        cls.good, cls.bad = 5, 3
        t = cls.srv.create_tenant()
        md = cgtest.bearer(cls.srv.create_key(t.tenant_id).secret)
        stub = budget_pb2_grpc.BudgetServiceStub(cls.srv.channel())
        sc = common_pb2.Scope(session_id="s-" + uuid.uuid4().hex[:8])
        stub.SetBudget(B.SetBudgetRequest(scope=sc, settings=B.BudgetSettings(limit_tokens=1000)),
                       metadata=md, timeout=10)
        for _ in range(cls.good):
            stub.CheckBudget(B.CheckBudgetRequest(scope=sc, estimated_tokens=10), metadata=md,
                             timeout=10)
        # Decisions: one with the 90 % tier's delay (returned, not held), one refused Reserve.
        r = stub.CheckBudget(B.CheckBudgetRequest(scope=sc, estimated_tokens=900,
                                                  delay_mode=B.DELAY_MODE_RETURN_ONLY),
                             metadata=md, timeout=10)
        cls.warned_delay_ms = r.backpressure_delay_ms
        try:
            stub.Reserve(B.ReserveRequest(scope=sc, tokens=5000), metadata=md, timeout=10)
            raise AssertionError("a Reserve over the HARD limit was accepted")
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise AssertionError(f"expected RESOURCE_EXHAUSTED, got {e.code()}") from None
        for _ in range(cls.bad):
            try:  # no session: refused as INVALID_ARGUMENT
                stub.CheckBudget(B.CheckBudgetRequest(scope=common_pb2.Scope(), estimated_tokens=1),
                                 metadata=md, timeout=10)
                raise AssertionError("CheckBudget without a session was accepted")
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.INVALID_ARGUMENT:
                    raise AssertionError(f"expected INVALID_ARGUMENT, got {e.code()}") from None

    def metrics(self):
        status, headers, body = get(self.port, "/metrics")
        self.assertEqual(status, 200)
        return headers, body

    def test_healthz_says_ok(self):
        status, _, body = get(self.port, "/healthz")
        self.assertEqual((status, body), (200, "ok\n"))

    def test_readyz_is_200_while_serving(self):
        status, _, _ = get(self.port, "/readyz")
        self.assertEqual(status, 200)

    def test_head_answers_without_a_body(self):
        status, headers, body = get(self.port, "/metrics", method="HEAD")
        self.assertEqual((status, body), (200, ""))
        self.assertTrue(headers["content-type"].startswith("text/plain; version=0.0.4"))

    def test_other_paths_are_404_and_other_methods_405(self):
        self.assertEqual(get(self.port, "/nope")[0], 404)
        self.assertEqual(get(self.port, "/metrics/x")[0], 404)
        status, headers, _ = get(self.port, "/metrics", method="POST")
        self.assertEqual(status, 405)
        self.assertEqual(headers.get("allow"), "GET, HEAD")
        self.assertEqual(get(self.port, "/healthz", method="DELETE")[0], 405)

    def test_metrics_count_the_calls_with_their_labels(self):
        headers, text = self.metrics()
        self.assertEqual(headers["content-type"], "text/plain; version=0.0.4; charset=utf-8")
        started = sample(text, "grpc_server_started_total", CHECK_LABELS)
        ok = sample(text, "grpc_server_handled_total", CHECK_LABELS + ',grpc_code="OK"')
        bad = sample(text, "grpc_server_handled_total",
                     CHECK_LABELS + ',grpc_code="INVALID_ARGUMENT"')
        # The good ones, the warned one (OK too) and the refused ones.
        oks = self.good + 1
        self.assertEqual((started, ok, bad), (oks + self.bad, oks, self.bad), text)
        count = sample(text, "grpc_server_handling_seconds_count", CHECK_LABELS)
        inf = sample(text, "grpc_server_handling_seconds_bucket", CHECK_LABELS + ',le="+Inf"')
        self.assertEqual((count, inf), (oks + self.bad,) * 2)
        for le in ("0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10"):
            self.assertIsNotNone(sample(text, "grpc_server_handling_seconds_bucket",
                                        CHECK_LABELS + f',le="{le}"'), le)
        self.assertGreater(sample(text, "grpc_server_handling_seconds_sum", CHECK_LABELS), 0)
        # Methods never called are started at 0; codes never seen are not there.
        self.assertEqual(sample(text, "grpc_server_started_total",
                                'grpc_type="server_stream",grpc_service="ctxguard.v1.'
                                'BudgetService",grpc_method="WatchUsage"'), 0)
        self.assertIsNone(sample(text, "grpc_server_handled_total",
                                 CHECK_LABELS + ',grpc_code="NOT_FOUND"'))

    def test_metrics_count_budget_decisions_and_their_delays(self):
        _, text = self.metrics()
        decided = 'grpc_method="CheckBudget",decision='
        self.assertEqual(sample(text, "ctxguard_budget_decisions_total", decided + '"allow"'),
                         self.good, text)
        self.assertEqual(sample(text, "ctxguard_budget_decisions_total",
                                decided + '"allow_with_warning"'), 1)
        self.assertEqual(sample(text, "ctxguard_budget_decisions_total",
                                'grpc_method="Reserve",decision="deny"'), 1)
        # The refused CheckBudget calls (bad input) decided nothing.
        self.assertIsNone(sample(text, "ctxguard_budget_decisions_total", decided + '"deny"'))
        delay = 'grpc_method="CheckBudget"'
        self.assertEqual(self.warned_delay_ms, 750)
        self.assertEqual(sample(text, "ctxguard_backpressure_delay_seconds_count", delay),
                         self.good + 1)
        self.assertEqual(sample(text, "ctxguard_backpressure_delay_seconds_bucket",
                                delay + ',le="0.001"'), self.good, "the undelayed ones")
        self.assertEqual(sample(text, "ctxguard_backpressure_delay_seconds_bucket",
                                delay + ',le="0.3"'), self.good)
        self.assertEqual(sample(text, "ctxguard_backpressure_delay_seconds_bucket",
                                delay + ',le="0.75"'), self.good + 1)
        self.assertAlmostEqual(sample(text, "ctxguard_backpressure_delay_seconds_sum", delay), 0.75)

    def test_metrics_say_where_the_budget_reads_found_their_rows(self):
        _, text = self.metrics()
        look = lambda layer, result: sample(  # noqa: E731
            text, "ctxguard_cache_lookups_total", f'layer="{layer}",result="{result}"') or 0
        # Every decided CheckBudget looked in the process cache once (the 5 good ones and the
        # warned one; the Reserve writes and reads its rows in its transaction instead).
        self.assertEqual(look("process", "hit") + look("process", "miss"), self.good + 1, text)
        self.assertGreater(look("process", "miss"), 0, "the first read of a new scope")
        # What the process cache missed, Redis or PostgreSQL answered.
        self.assertEqual(look("process", "miss"), look("redis", "hit") + look("postgresql", "hit"))
        self.assertEqual(look("postgresql", "error"), 0)

    def test_metrics_time_the_stores_calls(self):
        _, text = self.metrics()
        for store in ("postgresql", "redis"):
            label = f'store="{store}"'
            self.assertGreater(sample(text, "ctxguard_store_call_seconds_count", label), 0, store)
            self.assertEqual(sample(text, "ctxguard_store_call_seconds_count", label),
                             sample(text, "ctxguard_store_call_seconds_bucket",
                                    label + ',le="+Inf"'))
            self.assertEqual(sample(text, "ctxguard_store_errors_total", label), 0, store)

    def test_metrics_read_the_queues_and_streams_when_scraped(self):
        _, text = self.metrics()
        for name in ("ctxguard_pool_queued_jobs", "ctxguard_open_lane_queued_jobs",
                     "ctxguard_watch_streams_open"):
            m = re.search(r"(?m)^" + name + r" (\S+)$", text)
            self.assertIsNotNone(m, name)
            self.assertEqual(float(m.group(1)), 0, name)  # nothing waits, no stream is open

    def test_metrics_have_build_info_and_process_figures(self):
        _, text = self.metrics()
        self.assertRegex(text, r'(?m)^ctxguard_build_info\{version="[0-9.]+",compiler="[^"]+"\} 1$')
        for name in ("process_cpu_seconds_total", "process_resident_memory_bytes",
                     "process_start_time_seconds", "process_open_fds"):
            m = re.search(rf"(?m)^{name} (\S+)$", text)
            self.assertIsNotNone(m, name)
            self.assertGreater(float(m.group(1)), 0, name)
        start = float(re.search(r"(?m)^process_start_time_seconds (\S+)$", text).group(1))
        self.assertLess(abs(start - time.time()), 600, "start time is seconds since the epoch")

    def test_promtool_accepts_the_exposition(self):
        promtool = shutil.which("promtool")
        if promtool is None:
            self.fail("promtool is missing: apt-get install prometheus")
        _, text = self.metrics()
        r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=30)
        self.assertEqual(r.returncode, 0, f"promtool: {r.stdout}{r.stderr}")
        # It also lints: e.g. counters must end in _total. No complaint expected.
        self.assertEqual((r.stdout + r.stderr).strip(), "")

    def test_a_real_prometheus_scrapes_the_counters(self):
        prometheus = shutil.which("prometheus")
        if prometheus is None:
            self.fail("prometheus is missing: apt-get install prometheus")
        tmp = tempfile.TemporaryDirectory(prefix="cg-prom-")
        self.addCleanup(tmp.cleanup)
        cfg = os.path.join(tmp.name, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "scrape_configs:\n  - job_name: ctxguard\n"
                    f"    static_configs:\n      - targets: ['127.0.0.1:{self.port}']\n")
        web = free_port()
        proc = subprocess.Popen(
            [prometheus, f"--config.file={cfg}", f"--storage.tsdb.path={tmp.name}/data",
             f"--web.listen-address=127.0.0.1:{web}", "--log.level=warn"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

        def stop():
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            proc.stderr.close()
        self.addCleanup(stop)

        query = ('grpc_server_handled_total{job="ctxguard",grpc_method="CheckBudget",'
                 'grpc_code="INVALID_ARGUMENT"}')
        url = "/api/v1/query?query=" + urllib.parse.quote(query)
        deadline = time.monotonic() + 30
        last = None
        while time.monotonic() < deadline:
            self.assertIsNone(proc.poll(), "prometheus exited")
            try:
                status, _, body = get(web, url, timeout=2)
                last = body
                result = json.loads(body)["data"]["result"] if status == 200 else []
            except (OSError, ValueError, KeyError, http.client.HTTPException):
                result = []
            if result:
                labels, (_, value) = result[0]["metric"], result[0]["value"]
                self.assertEqual(labels["grpc_type"], "unary")
                self.assertEqual(labels["grpc_service"], "ctxguard.v1.BudgetService")
                self.assertEqual(float(value), self.bad)
                break
            time.sleep(0.3)
        else:
            self.fail(f"prometheus never had {query}; last answer: {last}")
        # The scrape itself was healthy.
        status, _, body = get(web, "/api/v1/query?query=" + urllib.parse.quote('up{job="ctxguard"}'))
        self.assertEqual(json.loads(body)["data"]["result"][0]["value"][1], "1")


class StreamsGauge(cgtest.TestCase):
    def test_an_open_watch_stream_shows_until_it_ends(self):
        srv = cgtest.Server(env={"CTXGUARD_HTTP_LISTEN": "127.0.0.1:0"})
        self.addCleanup(srv.close)
        srv.start()
        port = http_port(srv)
        t = srv.create_tenant()
        md = cgtest.bearer(srv.create_key(t.tenant_id).secret)
        stub = budget_pb2_grpc.BudgetServiceStub(srv.channel())
        sc = common_pb2.Scope(session_id="w-" + uuid.uuid4().hex[:8])
        stub.SetBudget(B.SetBudgetRequest(scope=sc, settings=B.BudgetSettings(limit_tokens=100)),
                       metadata=md, timeout=10)

        def open_streams():
            return sample_bare(get(port, "/metrics")[2], "ctxguard_watch_streams_open")

        it = stub.WatchUsage(B.WatchUsageRequest(scope=sc, send_snapshot=True), metadata=md,
                             timeout=60)
        next(it)  # the snapshot: the stream is open
        self.assertEqual(open_streams(), 1)
        it.cancel()
        cgtest.wait_until(lambda: open_streams() == 0, 10, "the cancelled stream is gone")


def sample_bare(text, name):
    """The value of the unlabelled sample `name`, or None."""
    m = re.search(r"(?m)^" + re.escape(name) + r" (\S+)$", text)
    return float(m.group(1)) if m else None


class HttpOff(cgtest.TestCase):
    def test_without_http_listen_there_is_no_http_port(self):
        srv = cgtest.start_server(self)
        self.assertNotIn("http listening", srv.log_text())
        # No listening socket of the server's own but gRPC's: the process's TCP listeners.
        out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, timeout=10).stdout
        mine = [l for l in out.splitlines() if f"pid={srv.proc.pid}," in l]
        ports = {int(re.search(r":(\d+)\s", l).group(1)) for l in mine}
        self.assertEqual(ports, {srv.port}, out)


class ReadyzFollowsHealth(cgtest.TestCase):
    """/readyz reads the state gRPC health reports: 503 while PostgreSQL is unreachable (the
    server reaches it through a proxy this test cuts), 200 again when it returns."""

    def test_readyz_is_503_while_postgres_is_unreachable(self):
        host, port = cgtest.dsn_host_port(cgtest.pg_dsn())
        proxy = cgtest.TcpProxy(host, port)
        self.addCleanup(proxy.close)
        dsn = cgtest.dsn_with_host_port(cgtest.pg_dsn(), "127.0.0.1", proxy.port)
        srv = cgtest.start_server(self, pg=dsn, env={
            "CTXGUARD_HTTP_LISTEN": "127.0.0.1:0",
            "CTXGUARD_HEALTH_INTERVAL_MS": "100",
            "CTXGUARD_PG_CONNECT_TIMEOUT_MS": "500",
        })
        hp = http_port(srv)
        self.assertEqual(get(hp, "/readyz")[0], 200)
        proxy.cut()
        cgtest.wait_until(lambda: get(hp, "/readyz")[0] == 503, 10, "/readyz 503")
        status, _, body = get(hp, "/readyz")
        self.assertIn("not ready", body)
        self.assertEqual(get(hp, "/healthz")[0], 200, "the process still runs")
        # The probes that failed are the store's errors.
        errors = sample(get(hp, "/metrics")[2], "ctxguard_store_errors_total",
                        'store="postgresql"')
        self.assertGreater(errors, 0)
        proxy.restore()
        cgtest.wait_until(lambda: get(hp, "/readyz")[0] == 200, 15, "/readyz 200 again")


class HttpTls(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="cg-http-tls-")
        cls.addClassCleanup(cls.tmp.cleanup)
        cls.certs = cgtest.Certs(cls.tmp.name)
        cls.srv = cgtest.start_class_server(cls, env={
            "CTXGUARD_HTTP_LISTEN": "127.0.0.1:0",
            "CTXGUARD_HTTP_TLS_CERT": cls.certs.server_cert,
            "CTXGUARD_HTTP_TLS_KEY": cls.certs.server_key,
        })
        cls.port = http_port(cls.srv)

    def test_https_answers_with_a_verified_certificate(self):
        self.assertIn("tls=on", [l for l in self.srv.log_text().splitlines()
                                 if "http listening" in l][0])
        ctx = ssl.create_default_context(cafile=self.certs.ca_pem)
        status, _, body = get(self.port, "/healthz", tls_context=ctx)
        self.assertEqual((status, body), (200, "ok\n"))
        status, _, body = get(self.port, "/metrics", tls_context=ctx)
        self.assertEqual(status, 200)
        self.assertIn("grpc_server_started_total", body)

    def test_plain_http_is_refused(self):
        with self.assertRaises((OSError, http.client.HTTPException)):
            get(self.port, "/healthz", timeout=5)

    def test_bad_tls_settings_fail_fast_naming_the_key(self):
        cases = [
            ({"CTXGUARD_HTTP_TLS_CERT": self.certs.server_cert}, "http_tls_key"),
            ({"CTXGUARD_HTTP_TLS_CERT": "/nonexistent.pem",
              "CTXGUARD_HTTP_TLS_KEY": self.certs.server_key}, "http_tls_cert"),
            ({"CTXGUARD_HTTP_TLS_CERT": self.certs.server_cert,
              "CTXGUARD_HTTP_TLS_KEY": os.path.join(self.tmp.name, "client.key")}, "http_tls"),
        ]
        for env, key in cases:
            with self.subTest(key=key, env=env):
                env = dict(env, CTXGUARD_HTTP_LISTEN="127.0.0.1:0")
                srv = cgtest.Server(env=env)
                self.addCleanup(srv.close)
                srv.start_async()
                rc = srv.wait_exit(30)
                self.assertEqual(rc, 2, srv.log_text())
                self.assertIn(key, srv.log_text())

    def test_bad_listen_address_fails_fast_naming_the_key(self):
        srv = cgtest.Server(env={"CTXGUARD_HTTP_LISTEN": "127.0.0.1"})
        self.addCleanup(srv.close)
        srv.start_async()
        self.assertEqual(srv.wait_exit(30), 2)
        self.assertIn("http_listen", srv.log_text())

    def test_event_streams_that_could_take_every_connection_fail_fast(self):
        srv = cgtest.Server(env={"CTXGUARD_HTTP_LISTEN": "127.0.0.1:0",
                                 "CTXGUARD_HTTP_MAX_CONNECTIONS": "16",
                                 "CTXGUARD_HTTP_EVENT_STREAMS_MAX": "16"})
        self.addCleanup(srv.close)
        srv.start_async()
        self.assertEqual(srv.wait_exit(30), 2)
        self.assertIn("http_event_streams_max", srv.log_text())
        self.assertIn("http_max_connections", srv.log_text())


if __name__ == "__main__":
    unittest.main()
