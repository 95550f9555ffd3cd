"""Group commit across tenants (server/service/budget_batch.c, write_batch_scope = mixed):
concurrent Reserves and Commits of several tenants share one transaction, and each tenant's
decisions are still those of requests run alone. The tenants here use the same session and
task ids with different limits, so a batch that mixed their rows up would break a limit or
put usage in the wrong tenant. A part that fails (a constraint on one tenant's ledger rows)
rolls the batch back and every request goes to the one-request path: the other tenants'
Commits still succeed. A tenant naming another tenant's reservation in the same batch gets
NOT_FOUND, and the owner's Commit counts once. With write_batch_scope = tenant, no batch holds two tenants."""

import re

import grpc

import cgtest
from cgtest import budget_pb2, budget_pb2_grpc, common_pb2
from test_batch import run_together

B = budget_pb2
SESSION = "s-shared"
TASK = common_pb2.Scope(session_id=SESSION, task_id="t")
N_TENANTS = 6


class MixedBatches(cgtest.TestCase):
    SCOPE = "mixed"

    @classmethod
    def setUpClass(cls):
        env = {"CTXGUARD_LOG_LEVEL": "debug", "CTXGUARD_IO_THREADS": "8",
               "CTXGUARD_WRITE_BATCHING": "true", "CTXGUARD_WRITE_BATCH_SCOPE": cls.SCOPE}
        cls.srv = cgtest.start_class_server(cls, env=env)

    def setUp(self):
        self.stub = budget_pb2_grpc.BudgetServiceStub(self.srv.channel())
        self.tenants = []  # (tenant_id, metadata, task limit)
        for k in range(N_TENANTS):
            t = self.srv.create_tenant()
            md = cgtest.bearer(self.srv.create_key(t.tenant_id).secret)
            limit = 50 * (k + 1)
            for sc, lim in ((common_pb2.Scope(), 10**9),
                            (common_pb2.Scope(session_id=SESSION), 10**8), (TASK, limit)):
                self.stub.SetBudget(B.SetBudgetRequest(
                    scope=sc, settings=B.BudgetSettings(limit_tokens=lim,
                                                        mode=B.BUDGET_MODE_HARD)),
                    metadata=md, timeout=10)
            self.tenants.append((t.tenant_id, md, limit))

    def reserve(self, k, tokens):
        return self.stub.Reserve(B.ReserveRequest(scope=TASK, tokens=tokens,
                                                  delay_mode=B.DELAY_MODE_RETURN_ONLY),
                                 metadata=self.tenants[k][1], timeout=30)

    def commit(self, k, rid, tokens):
        return self.stub.Commit(B.CommitRequest(reservation_id=rid,
                                                usage=common_pb2.TokenUsage(input_tokens=tokens)),
                                metadata=self.tenants[k][1], timeout=30)

    def usage(self, k):
        return self.stub.GetBudget(B.GetBudgetRequest(scope=TASK), metadata=self.tenants[k][1],
                                   timeout=10).usage

    def batch_tenants(self, start=0):
        """The tenant count of every batch logged after line `start`."""
        lines = self.srv.log_text().splitlines()[start:]
        return [int(m.group(1)) for m in (re.search(r"batch n=\d+ tenants=(\d+)", x)
                                          for x in lines) if m]

    def failed_mixed_batches(self, start=0):
        lines = self.srv.log_text().splitlines()[start:]
        return [x for x in lines
                if re.search(r"batch of \d+ \(([2-9]|\d\d+) tenants\) failed", x)]

    def test_each_tenant_limit_holds_in_shared_batches(self):
        per = 8
        results = run_together(N_TENANTS * per, lambda i: (i % N_TENANTS,
                                                           self.reserve(i % N_TENANTS, 50)))
        held = {k: [] for k in range(N_TENANTS)}
        for r in results:
            self.assertFalse(isinstance(r, grpc.RpcError) and
                             r.code() != grpc.StatusCode.RESOURCE_EXHAUSTED,
                             getattr(r, "details", lambda: "")())
            if not isinstance(r, grpc.RpcError):
                held[r[0]].append(r[1].reservation.reservation_id)
        for k, (_, _, limit) in enumerate(self.tenants):
            self.assertEqual(len(held[k]), limit // 50, f"tenant {k}: its own limit, exactly")
            u = self.usage(k)
            self.assertEqual((u.reserved_tokens, u.used_tokens), (limit, 0), f"tenant {k}")
        jobs = [(k, rid) for k in held for rid in held[k]]
        done = run_together(len(jobs), lambda i: self.commit(jobs[i][0], jobs[i][1],
                                                             10 + jobs[i][0]))
        for d in done:
            self.assertFalse(isinstance(d, grpc.RpcError), getattr(d, "details", lambda: "")())
        for k in range(N_TENANTS):
            u = self.usage(k)
            self.assertEqual((u.reserved_tokens, u.used_tokens),
                             (0, len(held[k]) * (10 + k)), f"tenant {k}")
        counts = self.batch_tenants()
        if self.SCOPE == "mixed":
            self.assertGreaterEqual(max(counts, default=0), 2,
                                    "requests of several tenants at once share a batch")
        else:
            self.assertEqual(max(counts, default=0), 1, "one tenant per batch")

    def test_a_failing_tenant_part_does_not_fail_the_others(self):
        bad = self.tenants[0][0]
        cgtest.psql(f"ALTER TABLE ledger ADD CONSTRAINT e2e_batch_mixed_{bad[:8]} CHECK "
                    f"(tenant_id <> '{bad}'::uuid OR input_tokens <> 7)", dsn=self.srv.dsn)
        start = len(self.srv.log_text().splitlines())
        # tenant 0 (limit 50) holds one reservation, the others two each
        held = [(0, self.reserve(0, 25).reservation.reservation_id)]
        committed = {k: 0 for k in range(N_TENANTS)}
        seen_failure = False
        for _ in range(5):  # until a failed batch held several tenants (usually the first)
            for k in range(1, N_TENANTS):
                held += [(k, self.reserve(k, 25).reservation.reservation_id) for _ in range(2)]
            jobs = list(held)
            done = run_together(len(jobs), lambda i: self.commit(
                jobs[i][0], jobs[i][1], 7 if jobs[i][0] == 0 else 5))
            self.assertIsInstance(done[0], grpc.RpcError, "the constraint refuses tenant 0")
            for (k, _), d in zip(jobs[1:], done[1:]):
                self.assertFalse(isinstance(d, grpc.RpcError),
                                 getattr(d, "details", lambda: "")())
                committed[k] += 1
            held = jobs[:1]
            seen_failure = bool(self.failed_mixed_batches(start))
            if seen_failure or self.SCOPE != "mixed":
                break
        u0 = self.usage(0)
        self.assertEqual((u0.reserved_tokens, u0.used_tokens), (25, 0),
                         "tenant 0's refused Commit left its hold as it was")
        for k in range(1, N_TENANTS):
            u = self.usage(k)
            self.assertEqual((u.reserved_tokens, u.used_tokens), (0, 5 * committed[k]),
                             f"tenant {k}")
        if self.SCOPE == "mixed":
            self.assertTrue(seen_failure, "a batch of several tenants failed and fell back")

    def test_another_tenants_reservation_is_not_found_in_a_shared_batch(self):
        held = [self.reserve(k, 25).reservation.reservation_id for k in range(N_TENANTS)]
        # each tenant commits its own reservation; its neighbour names the same id at once
        jobs = [(k, held[k]) for k in range(N_TENANTS)] + \
               [((k + 1) % N_TENANTS, held[k]) for k in range(N_TENANTS)]
        done = run_together(len(jobs), lambda i: self.commit(jobs[i][0], jobs[i][1], 5))
        for (k, _), d in zip(jobs[:N_TENANTS], done[:N_TENANTS]):
            self.assertFalse(isinstance(d, grpc.RpcError), f"tenant {k}: its own Commit")
        for (k, _), d in zip(jobs[N_TENANTS:], done[N_TENANTS:]):
            self.assertIsInstance(d, grpc.RpcError, f"tenant {k}: another tenant's reservation")
            self.assertEqual(d.code(), grpc.StatusCode.NOT_FOUND, d.details())
        for k in range(N_TENANTS):
            u = self.usage(k)
            self.assertEqual((u.reserved_tokens, u.used_tokens), (0, 5), f"tenant {k}")


class TenantBatches(MixedBatches):
    SCOPE = "tenant"

