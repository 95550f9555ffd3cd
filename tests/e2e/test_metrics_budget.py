"""The budget families of /metrics as a real Prometheus sees them (PromQL): reservations created,
committed, released and expired (by the sweeper, from a short ttl_ms); approvals requested,
approved, denied and expired (by CloseScope); the pending approvals and the oldest one's age;
the batch sizes; and ctxguard_budget_used_ratio, read from PostgreSQL by the monitor thread,
whose top-N series are replaced whole: a tenant that falls out of the top N disappears.
promtool accepts the exposition."""

import http.client
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import uuid

import cgtest
from cgtest import budget_pb2, budget_pb2_grpc, common_pb2
from test_http import free_port, get, http_port, sample

B = budget_pb2
APPROVAL = B.BUDGET_MODE_APPROVAL

# The monitor thread refreshes the gauges at most this often (service/gauges.h), plus
# Prometheus' 1 s scrape: what a wait for a gauge may take, with room.
GAUGE_WAIT_S = 30


def scope(session):
    return common_pb2.Scope(session_id=session)


class Tenant:
    """A tenant with an admin key that spends and an operator key that decides approvals."""

    def __init__(self, srv):
        t = srv.create_tenant()
        self.id = t.tenant_id
        self.md = cgtest.bearer(srv.create_key(t.tenant_id).secret)
        self.approver_md = cgtest.bearer(
            srv.create_key(t.tenant_id, name="approver", role="operator").secret)
        self.stub = budget_pb2_grpc.BudgetServiceStub(srv.channel())

    def set(self, sc, limit, **kw):
        self.stub.SetBudget(B.SetBudgetRequest(
            scope=sc, settings=B.BudgetSettings(limit_tokens=limit, **kw)),
            metadata=self.md, timeout=10)

    def reserve(self, sc, tokens, **kw):
        return self.stub.Reserve(B.ReserveRequest(scope=sc, tokens=tokens,
                                                  delay_mode=B.DELAY_MODE_RETURN_ONLY, **kw),
                                 metadata=self.md, timeout=10)

    def commit(self, rid, tokens):
        self.stub.Commit(B.CommitRequest(reservation_id=rid,
                                         usage=common_pb2.TokenUsage(input_tokens=tokens)),
                         metadata=self.md, timeout=10)

    def spend(self, sc, hold, used):
        """A Reserve of hold tokens committed with used."""
        self.commit(self.reserve(sc, hold).reservation.reservation_id, used)

    def release(self, rid):
        self.stub.Release(B.ReleaseRequest(reservation_id=rid), metadata=self.md, timeout=10)

    def resolve(self, approval_id, decision):
        self.stub.ResolveApproval(B.ResolveApprovalRequest(approval_id=approval_id,
                                                           decision=decision),
                                  metadata=self.approver_md, timeout=10)

    def close(self, sc):
        self.stub.CloseScope(B.CloseScopeRequest(scope=sc), metadata=self.md, timeout=10)


class Prometheus:
    """A Prometheus scraping the server's /metrics every second; add_cleanup (a test's
    addCleanup or a class's addClassCleanup) stops it and removes its files."""

    def __init__(self, add_cleanup, target_port):
        prometheus = shutil.which("prometheus")
        if prometheus is None:
            raise AssertionError("prometheus is missing: apt-get install prometheus")
        tmp = tempfile.TemporaryDirectory(prefix="cg-prom-")
        add_cleanup(tmp.cleanup)
        cfg = os.path.join(tmp.name, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "scrape_configs:\n  - job_name: ctxguard\n"
                    f"    static_configs:\n      - targets: ['127.0.0.1:{target_port}']\n")
        self.port = free_port()
        self.proc = subprocess.Popen(
            [prometheus, f"--config.file={cfg}", f"--storage.tsdb.path={tmp.name}/data",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        add_cleanup(self.stop)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stderr.close()

    def query(self, promql):
        """The instant vector of promql as a list of (labels, value); [] while unavailable."""
        if self.proc.poll() is not None:
            raise AssertionError("prometheus exited")
        try:
            status, _, body = get(self.port, "/api/v1/query?query=" + urllib.parse.quote(promql),
                                  timeout=2)
            if status != 200:
                return []
            return [(r["metric"], float(r["value"][1])) for r in json.loads(body)["data"]["result"]]
        except (OSError, ValueError, KeyError, http.client.HTTPException):
            return []

    def wait_for(self, promql, want, timeout=GAUGE_WAIT_S):
        """Polls promql until its result, as {tuple of the label values of the keys of
        `want`'s first key: value}, equals want; returns it or fails naming the last one."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = self.query(promql)
            if self.shape(last, want) == want:
                return last
            time.sleep(0.3)
        raise AssertionError(f"prometheus: {promql} never was {want}; last: {last}")

    @staticmethod
    def shape(result, want):
        """result as a dict keyed like want: by label value (one label named in want's keys
        as 'label=value'), or by None for a single unlabelled sample."""
        if list(want) == [None]:
            return {None: result[0][1]} if len(result) == 1 else {}
        label = next(iter(want)).split("=", 1)[0]
        return {f"{label}={m.get(label)}": v for m, v in result}


class BudgetFamilies(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls, env={
            "CTXGUARD_HTTP_LISTEN": "127.0.0.1:0",
            "CTXGUARD_SWEEP_INTERVAL_MS": "200",
        })
        cls.port = http_port(cls.srv)
        t = cls.t = Tenant(cls.srv)
        # Reservations: one committed, one released, one left to expire (ttl 1 s); the hot
        # session ends at 850 of 1000 used.
        cls.hot = scope("hot-" + uuid.uuid4().hex[:8])
        t.set(cls.hot, 1000)
        t.spend(cls.hot, 900, 850)
        t.release(t.reserve(cls.hot, 10).reservation.reservation_id)
        t.reserve(cls.hot, 10, ttl_ms=1000)
        # Approvals: four requested (each a Reserve over an APPROVAL limit); one approved, one
        # denied, one expired by closing its session, one left pending.
        opened = []
        for name in ("approve", "deny", "close", "wait"):
            sc = scope(f"{name}-" + uuid.uuid4().hex[:8])
            t.set(sc, 100, mode=APPROVAL)
            r = t.reserve(sc, 500)
            if r.decision != B.DECISION_REQUIRE_APPROVAL:
                raise AssertionError(f"expected REQUIRE_APPROVAL, got {r.decision}")
            opened.append((sc, r.approval_id))
        t.resolve(opened[0][1], B.APPROVAL_STATE_APPROVED)
        t.resolve(opened[1][1], B.APPROVAL_STATE_DENIED)
        t.close(opened[2][0])
        cls.prom = Prometheus(cls.addClassCleanup, cls.port)

    def test_prometheus_counts_the_reservations_by_outcome(self):
        # The expired one: the sweeper (every 200 ms) settles it once its second is over.
        self.prom.wait_for('ctxguard_reservations_total{job="ctxguard"}', {
            "outcome=created": 3, "outcome=committed": 1, "outcome=released": 1,
            "outcome=expired": 1})

    def test_prometheus_counts_the_approvals_by_event(self):
        self.prom.wait_for('ctxguard_approvals_total{job="ctxguard"}', {
            "event=requested": 4, "event=approved": 1, "event=denied": 1, "event=expired": 1})

    def test_prometheus_reads_the_pending_approvals_and_the_oldest_age(self):
        self.prom.wait_for('ctxguard_approvals_pending{job="ctxguard"}', {None: 1})
        age = self.prom.query('ctxguard_approval_oldest_pending_seconds{job="ctxguard"}')
        self.assertEqual(len(age), 1, age)
        self.assertGreater(age[0][1], 0)
        self.assertLess(age[0][1], 600, "seconds since the request, not since the epoch")

    def test_prometheus_reads_the_budget_nearest_its_limit(self):
        # The hot session (0.85) is the tenant's highest session; the tenant has no budget of
        # its own, and the APPROVAL sessions used nothing.
        got = self.prom.wait_for(f'ctxguard_budget_used_ratio{{tenant_id="{self.t.id}"}}',
                                 {"level=session": 0.85})
        self.assertEqual(got[0][0]["job"], "ctxguard")

    def test_prometheus_sees_the_batch_sizes(self):
        # Each Reserve and Commit came alone: four batches (two Reserves that held, the one
        # left to expire and the Commit) of one write each; the Reserves that asked for an
        # approval wrote nothing in a batch.
        self.prom.wait_for('ctxguard_store_batch_size_count{job="ctxguard"}', {None: 4})
        self.prom.wait_for('ctxguard_store_batch_size_bucket{job="ctxguard",le="1"}', {None: 4})
        self.prom.wait_for('ctxguard_store_batch_size_sum{job="ctxguard"}', {None: 4})

    def test_promtool_accepts_the_exposition(self):
        promtool = shutil.which("promtool")
        if promtool is None:
            self.fail("promtool is missing: apt-get install prometheus")
        # Once the gauges are there, so that their families are checked too.
        cgtest.wait_until(lambda: sample(get(self.port, "/metrics")[2],
                                         "ctxguard_budget_used_ratio",
                                         f'tenant_id="{self.t.id}",level="session"') is not None,
                          GAUGE_WAIT_S, "the budget ratio")
        text = get(self.port, "/metrics")[2]
        r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=30)
        self.assertEqual(r.returncode, 0, f"promtool: {r.stdout}{r.stderr}")
        self.assertEqual((r.stdout + r.stderr).strip(), "")


class BudgetTopN(cgtest.TestCase):
    """metrics_budget_top_n 1: the one budget nearest its limit is shown; when another passes
    it, the first disappears from the exposition and from Prometheus."""

    def test_a_budget_that_falls_out_of_the_top_n_disappears(self):
        srv = cgtest.start_server(self, env={"CTXGUARD_HTTP_LISTEN": "127.0.0.1:0",
                                             "CTXGUARD_METRICS_BUDGET_TOP_N": "1"})
        port = http_port(srv)
        first, second = Tenant(srv), Tenant(srv)
        a, b = scope("a-" + uuid.uuid4().hex[:8]), scope("b-" + uuid.uuid4().hex[:8])
        first.set(a, 1000)
        second.set(b, 1000)
        first.spend(a, 900, 850)  # 0.85
        second.spend(b, 600, 500)  # 0.5: not in the top 1
        prom = Prometheus(self.addCleanup, port)
        prom.wait_for("ctxguard_budget_used_ratio", {f"tenant_id={first.id}": 0.85})

        second.spend(b, 500, 450)  # 0.95: passes the first
        prom.wait_for("ctxguard_budget_used_ratio", {f"tenant_id={second.id}": 0.95})
        text = get(port, "/metrics")[2]
        self.assertIsNone(sample(text, "ctxguard_budget_used_ratio",
                                 f'tenant_id="{first.id}",level="session"'), text)
        self.assertEqual(sample(text, "ctxguard_budget_used_ratio",
                                f'tenant_id="{second.id}",level="session"'), 0.95)


if __name__ == "__main__":
    import unittest
    unittest.main()
