"""The Redis layer on a real 3-master Redis Cluster (scripts/services.sh
redis-cluster-start, Debian's redis-server in cluster mode on loopback): CheckBudget is
served from the node of each tenant's slot, on all three nodes, without MOVED or outage;
a slot migrated while Reserve/Commit/CheckBudget run (ASK during the migration, MOVED
after it) changes no decision and lets nothing past a tight HARD limit; a stopped node
sends its slots to PostgreSQL only (answers still right) while the others keep serving
from Redis, and is used again once it is back."""

import os
import shutil
import subprocess
import tempfile
import threading
import uuid

import grpc

import cgtest
from cgtest import budget_pb2, budget_pb2_grpc, common_pb2
from cgtest import wait_until
from test_budget_faults import Load

B = budget_pb2
DENY = B.DECISION_DENY
CACHE = B.BUDGET_SOURCE_CACHE
DATABASE = B.BUDGET_SOURCE_DATABASE


def cli(port, *args):
    r = subprocess.run(["redis-cli", "-p", str(port)] + [str(a) for a in args],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
    if r.returncode != 0:
        raise AssertionError(f"redis-cli -p {port} {args}: {r.stderr}")
    return r.stdout.strip()


class Cluster:
    """Three masters, no replicas, under a directory of their own."""

    def __init__(self):
        base = os.environ.get("CG_TEST_RUN_DIR") or None
        self.dir = tempfile.mkdtemp(prefix="cluster-", dir=base)
        self.sh("redis-cluster-start")
        with open(os.path.join(self.dir, "cluster", "ports")) as f:
            self.ports = [int(p) for p in f.read().split()]
        self.url = f"redis://127.0.0.1:{self.ports[0]}/0"

    def sh(self, command, *args):
        r = subprocess.run([cgtest.services_script(), command, self.dir] + [str(a) for a in args],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
        if r.returncode != 0:
            raise AssertionError(f"services.sh {command} failed: {r.stderr}")

    def close(self):
        try:
            self.sh("redis-cluster-stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def node_id(self, port):
        return cli(port, "CLUSTER", "MYID")

    def owner(self, tenant):
        """The port of the master serving the tenant's slot, and the slot."""
        slot = int(cli(self.ports[0], "CLUSTER", "KEYSLOT", f"cg:{{{tenant}}}:gen"))
        for line in cli(self.ports[0], "CLUSTER", "NODES").splitlines():
            f = line.split()
            if "master" not in f[2]:
                continue
            for part in f[8:]:
                lo, _, hi = part.partition("-")
                if lo.isdigit() and int(lo) <= slot <= int(hi or lo):
                    return int(f[1].split(":")[1].split("@")[0]), slot
        raise AssertionError(f"no master serves slot {slot}")

    def calls(self, port, command):
        """Successful calls of `command` on the node (INFO commandstats): a command refused
        with MOVED counts as rejected, not here."""
        for line in cli(port, "INFO", "commandstats").splitlines():
            if line.startswith(f"cmdstat_{command}:"):
                fields = dict(kv.split("=") for kv in line.split(":", 1)[1].split(","))
                return int(fields["calls"])
        return 0

    def all_ok(self):
        return all("cluster_state:ok" in cli(p, "CLUSTER", "INFO") and
                   "cluster_slots_ok:16384" in cli(p, "CLUSTER", "INFO") for p in self.ports)


def scope(session="", task=""):
    return common_pb2.Scope(session_id=session, task_id=task)


class RedisCluster(cgtest.TestCase):
    """Two replicas on one schema: `a` writes (its writes store the rows in Redis), `b`
    reads: a path b has never read misses b's process cache, so a CheckBudget of it that
    answers from a cache answered from Redis."""

    @classmethod
    def setUpClass(cls):
        cls.cluster = Cluster()
        cls.addClassCleanup(cls.cluster.close)

    def setUp(self):
        # 1 s: generous on a loaded 2-core machine, so that a timeout is not taken for the
        # outages these tests look for.
        env = {"CTXGUARD_REDIS_URL": self.cluster.url, "CTXGUARD_REDIS_TIMEOUT_MS": "1000"}
        self.a = cgtest.start_server(self, env=env)
        self.b = cgtest.start_server(self, env=env, schema=self.a.schema)
        self.sa = budget_pb2_grpc.BudgetServiceStub(self.a.channel())
        self.sb = budget_pb2_grpc.BudgetServiceStub(self.b.channel())

    def set_budget(self, md, sc, limit):
        self.sa.SetBudget(B.SetBudgetRequest(scope=sc, settings=B.BudgetSettings(
            limit_tokens=limit, backpressure_disabled=True)), metadata=md, timeout=10)

    def new_session(self, md, limit=10 ** 6):
        """A session with a budget, written through a: its row and the tenant's (rewritten:
        a Redis row expires CG_REDIS_ROW_TTL_MS after its last write) are in Redis."""
        self.set_budget(md, scope(), 10 ** 12)
        sc = scope("s-" + uuid.uuid4().hex[:8])
        self.set_budget(md, sc, limit)
        return sc

    def served_from_redis(self, md, tries=5):
        """Whether b answers a CheckBudget of a new path from a cache, which can only be
        Redis (b never read the path). A write announced to b while it reads makes b refuse
        what Redis gave (the process cache's rule), so a few paths are tried."""
        for _ in range(tries):
            r = self.check(self.sb, md, self.new_session(md))
            self.assertEqual(r.decision, B.DECISION_ALLOW)
            if r.source == CACHE:
                return True
        return False

    def tenants_on_every_node(self, per_node=2):
        """{port: [(tenant_id, metadata)]} with per_node tenants whose slot each master
        serves."""
        by_node = {p: [] for p in self.cluster.ports}
        for _ in range(60):
            if all(len(v) >= per_node for v in by_node.values()):
                break
            t = self.a.create_tenant()
            port, _ = self.cluster.owner(t.tenant_id)
            if len(by_node[port]) >= per_node:
                continue
            md = cgtest.bearer(self.a.create_key(t.tenant_id).secret)
            self.set_budget(md, scope(), 10 ** 12)
            by_node[port].append((t.tenant_id, md))
        self.assertTrue(all(len(v) >= per_node for v in by_node.values()), by_node)
        return by_node

    def check(self, stub, md, sc, tokens=10):
        return stub.CheckBudget(B.CheckBudgetRequest(scope=sc, estimated_tokens=tokens,
                                                     delay_mode=B.DELAY_MODE_RETURN_ONLY),
                                metadata=md, timeout=10)

    def assertNoOutage(self, *servers):
        for srv in servers:
            log = srv.log_text()
            lines = [ln for ln in log.splitlines() if "unavailable" in ln and "store_redis" in ln]
            self.assertEqual(lines[:3], [], "no Redis outage")

    def test_checkbudget_is_served_from_every_node(self):
        by_node = self.tenants_on_every_node()
        before = {p: self.cluster.calls(p, "mget") for p in self.cluster.ports}
        for port, tenants in by_node.items():
            for tenant, md in tenants:
                for _ in range(3):
                    self.assertTrue(self.served_from_redis(md), f"b read the path of a tenant "
                                                                f"of node {port} from Redis")
                keys = cli(port, "--scan", "--pattern", f"cg:{{{tenant}}}:row2:*")
                self.assertGreaterEqual(len(keys.splitlines()), 3,
                                        f"the tenant's rows are on its slot's node {port}")
        for p in self.cluster.ports:
            self.assertGreaterEqual(self.cluster.calls(p, "mget") - before[p], 6,
                                    f"node {p} answered the MGETs of its tenants")
        self.assertNoOutage(self.a, self.b)
        for srv in (self.a, self.b):
            # The slot map and the key slots computed by the server agree with the
            # cluster's own: not one command was redirected.
            self.assertFalse("redis cluster: MOVED" in srv.log_text(), "no redirection")
            self.assertTrue("is a cluster node: routing by slot" in srv.log_text())

    def test_committed_writes_of_many_tenants_reach_every_node(self):
        """Reserve+Commit of six tenants at once through a: a batch of several tenants
        puts their paths to Redis in one round trip per node (a pipeline). b, which never
        read these paths, must then find each one in Redis with the committed usage."""
        by_node = self.tenants_on_every_node()
        work = []
        for tenants in by_node.values():
            for tenant, md in tenants:
                work.append((tenant, md, self.new_session(md)))
        errors = []

        def spend(md, sc):
            try:
                for _ in range(5):
                    r = self.sa.Reserve(B.ReserveRequest(scope=sc, tokens=100,
                                                         delay_mode=B.DELAY_MODE_RETURN_ONLY),
                                        metadata=md, timeout=30)
                    self.sa.Commit(B.CommitRequest(
                        reservation_id=r.reservation.reservation_id,
                        usage=common_pb2.TokenUsage(input_tokens=70)), metadata=md, timeout=30)
            except grpc.RpcError as e:
                errors.append(e)
        threads = [threading.Thread(target=spend, args=(md, sc)) for _, md, sc in work]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertEqual(errors, [])
        for tenant, md, sc in work:
            r = self.check(self.sb, md, sc)
            self.assertEqual(r.source, CACHE, f"b found tenant {tenant}'s path in Redis")
            self.assertEqual(r.levels[-1].used_tokens, 350, "as committed, not as SetBudget "
                                                            "left it")
        self.assertNoOutage(self.a, self.b)

    def test_a_stopped_node_sends_its_slots_to_postgresql_only(self):
        by_node = self.tenants_on_every_node(per_node=1)
        down = self.cluster.ports[1]
        (_, lost_md), = by_node[down]
        self.set_budget(lost_md, scope("s"), 10 ** 6)
        task = scope("s", "t")
        self.set_budget(lost_md, task, 100)
        self.check(self.sb, lost_md, task)
        node = self.cluster.ports.index(down) + 1
        self.cluster.sh("redis-cluster-node-stop", node)
        self.addCleanup(self.cluster.sh, "redis-cluster-node-start", node)  # idempotent

        # The lost node's tenant: answers from PostgreSQL, right while its usage moves.
        for _ in range(2):
            r = self.sa.Reserve(B.ReserveRequest(scope=task, tokens=50), metadata=lost_md,
                                timeout=10)
            self.sa.Commit(B.CommitRequest(reservation_id=r.reservation.reservation_id,
                                           usage=common_pb2.TokenUsage(input_tokens=50)),
                           metadata=lost_md, timeout=10)
        for stub in (self.sa, self.sb):
            self.assertEqual(self.check(stub, lost_md, task).decision, DENY, "100 of 100 used")
        r = self.check(self.sb, lost_md, self.new_session(lost_md))
        self.assertEqual((r.decision, r.source), (B.DECISION_ALLOW, DATABASE))
        self.assertRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, self.sb.Reserve,
                            B.ReserveRequest(scope=task, tokens=1), metadata=lost_md, timeout=10)
        # The other nodes' tenants keep being read from Redis.
        for p in self.cluster.ports:
            if p == down:
                continue
            (_, md), = by_node[p]
            before = self.cluster.calls(p, "mget")
            for _ in range(3):
                self.assertTrue(self.served_from_redis(md))
            self.assertGreaterEqual(self.cluster.calls(p, "mget") - before, 3,
                                    f"node {p} still serves its slots")
        wait_until(lambda: f"redis node 127.0.0.1:{down} unavailable" in self.b.log_text(), 10,
                   "the lost node to be logged")

        # Back: the node's tenant is read from it again.
        self.cluster.sh("redis-cluster-node-start", node)
        wait_until(self.cluster.all_ok, 30, "the cluster to be whole again")
        wait_until(lambda: self.served_from_redis(lost_md, tries=1), 15,
                   "the node to serve its slots again")
        self.assertEqual(self.check(self.sb, lost_md, task).decision, DENY, "still 100 of 100")
        # The end of the outage is logged by the thread that saw it begin, when it next
        # reaches the node: keep b's threads busy with the node's slots until it does.
        def outage_over():
            if "redis reachable again" in self.b.log_text():
                return True
            self.served_from_redis(lost_md, tries=1)  # one more call through b's threads
            return False

        wait_until(outage_over, 30, "the end of the outage")

    def migrate(self, slot, src, dst, keys_first):
        """Moves slot from src to dst the way redis-cli --cluster reshard does. keys_first
        is called once every key is on dst while the slot is still MIGRATING (commands for
        it get ASK), before the slot is handed over (commands get MOVED)."""
        src_id, dst_id = self.cluster.node_id(src), self.cluster.node_id(dst)
        cli(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        cli(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        keys_first(lambda: self.move_keys(slot, src, dst))
        # The destination first, as redis-cli does: were the source told first, each would
        # send the slot's commands to the other (MOVED back and forth) until the second
        # learned it.
        for p in [dst, src] + [p for p in self.cluster.ports if p not in (src, dst)]:
            cli(p, "CLUSTER", "SETSLOT", slot, "NODE", dst_id)

    def move_keys(self, slot, src, dst):
        while True:
            keys = cli(src, "CLUSTER", "GETKEYSINSLOT", slot, 100).splitlines()
            if not keys:
                return
            out = cli(src, "MIGRATE", "127.0.0.1", dst, "", 0, 5000, "KEYS", *keys)
            self.assertIn(out, ("OK", "NOKEY"))

    def test_a_slot_migrated_under_load_changes_no_decision(self):
        t = self.a.create_tenant()
        md = cgtest.bearer(self.a.create_key(t.tenant_id).secret)
        task = scope("mig", "t")
        for sc, limit in ((scope(), 10 ** 12), (scope("mig"), 10 ** 11), (task, 3000)):
            self.set_budget(md, sc, limit)
        src, slot = self.cluster.owner(t.tenant_id)
        dst = next(p for p in self.cluster.ports if p != src)

        checks = {"errors": [], "n": 0}
        done = threading.Event()

        def checker(srv):
            stub = budget_pb2_grpc.BudgetServiceStub(srv.channel())
            while not done.is_set():
                try:
                    self.check(stub, md, task)
                    checks["n"] += 1
                except grpc.RpcError as e:
                    checks["errors"].append(e.code())
        checkers = [threading.Thread(target=checker, args=(srv,))
                    for srv in (self.a, self.b, self.b)]
        for c in checkers:
            c.start()
        self.addCleanup(lambda: [done.set()] + [c.join(30) for c in checkers])

        # Commits of 10 against a HARD limit of 3000 through both replicas: exactly 300 may
        # succeed. The load holds after 60 so that the migration surely happens while work
        # is left.
        load = Load([self.a, self.b], md, task, 10, threads=16, per_thread=25,
                    hold_at=60).start()
        self.addCleanup(load.resume)
        load.wait_for(lambda: len(load.acked) >= 60, 60, "60 acknowledged commits")

        def keys_first(move):
            move()
            load.resume()
            load.wait_for(lambda: len(load.acked) >= 150, 60, "commits while the slot migrates")
            move()  # keys the load created meanwhile on src (none if all went by ASK)
        self.migrate(slot, src, dst, keys_first)
        load.join()
        done.set()
        for c in checkers:
            c.join(30)

        self.assertEqual(load.errors, [], "the migration fails no Reserve or Commit")
        self.assertEqual(len(load.acked), 300, "the HARD limit is used up exactly")
        used = self.sa.GetBudget(B.GetBudgetRequest(scope=task), metadata=md,
                                 timeout=10).usage.used_tokens
        self.assertEqual(used, 3000, "no overspend")
        self.assertEqual(checks["errors"], [], "the migration fails no CheckBudget")
        self.assertGreater(checks["n"], 0)
        for stub in (self.sa, self.sb):
            self.assertEqual(self.check(stub, md, task).decision, DENY)
        self.assertEqual(cli(src, "CLUSTER", "COUNTKEYSINSLOT", slot), "0")
        logs = self.a.log_text() + self.b.log_text()
        self.assertTrue(f"redis cluster: ASK slot {slot}" in logs, "commands followed ASK")
        self.assertTrue(f"redis cluster: MOVED slot {slot}" in logs, "commands followed MOVED")
        # Redirections never ran out (MIGRATE blocks the source node for a moment: a timeout
        # then would be a miss the contract allows, so it is not looked for here).
        self.assertFalse("redirected more than" in logs, "no MOVED back and forth")
        # The tenant is served by its new node.
        before = self.cluster.calls(dst, "mget")
        self.assertTrue(self.served_from_redis(md))
        self.assertGreater(self.cluster.calls(dst, "mget"), before)


if __name__ == "__main__":
    import unittest
    unittest.main()
