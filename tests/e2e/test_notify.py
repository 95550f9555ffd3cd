"""Notification channels end to end: budget events pushed to a real local HTTP receiver by
real servers over real PostgreSQL. A signed webhook whose signature the receiver verifies, a
Slack payload, subscriptions by event type and scope prefix, a receiver that answers 500
(retried, then dead, listed and re-driven), one that is down and comes up, one that is slow,
a replica killed with SIGKILL mid-delivery (the other delivers the same delivery id: nothing
lost), two replicas delivering every event once, private addresses refused by default,
bad requests named by field, and the `ctxguardctl notify` commands driving all of it."""

import hashlib
import hmac
import http.server
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import uuid

import grpc

import cgtest
from cgtest import budget_pb2, budget_pb2_grpc, common_pb2

B = budget_pb2
INVALID = grpc.StatusCode.INVALID_ARGUMENT
WEBHOOK = B.NOTIFICATION_CHANNEL_KIND_WEBHOOK
SLACK = B.NOTIFICATION_CHANNEL_KIND_SLACK
WARNING = B.USAGE_EVENT_TYPE_WARNING
EXHAUSTED = B.USAGE_EVENT_TYPE_EXHAUSTED
PENDING, DELIVERED, DEAD = (B.NOTIFICATION_DELIVERY_STATE_PENDING,
                            B.NOTIFICATION_DELIVERY_STATE_DELIVERED,
                            B.NOTIFICATION_DELIVERY_STATE_DEAD)

FAST = {
    "CTXGUARD_NOTIFY_INTERVAL_MS": "100",
    "CTXGUARD_NOTIFY_TIMEOUT_MS": "1000",
    "CTXGUARD_NOTIFY_BACKOFF_BASE_MS": "100",
    "CTXGUARD_NOTIFY_BACKOFF_MAX_MS": "300",
    "CTXGUARD_NOTIFY_MAX_ATTEMPTS": "3",
    "CTXGUARD_NOTIFY_ALLOW_PRIVATE_ADDRESSES": "true",
    "CTXGUARD_SWEEP_INTERVAL_MS": "200",
    "CTXGUARD_RETENTION_INTERVAL_MS": "200",
}


def scope(session="", task="", agent=""):
    return common_pb2.Scope(session_id=session, task_id=task, agent_id=agent)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Receiver:
    """A real HTTP server on 127.0.0.1 that records every POST (headers and raw body) and
    answers as `mode` says: "ok" (204), "fail" (500), "slow" (answers after 2.5 s),
    "hold" (blocks until release())."""

    def __init__(self, port=None, mode="ok"):
        self.mode = mode
        self.got = []
        self.lock = threading.Lock()
        self.released = threading.Event()
        self.holding = threading.Event()
        rec = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with rec.lock:
                    rec.got.append((dict(self.headers.items()), body, rec.mode))
                    mode = rec.mode
                if mode == "hold":
                    rec.holding.set()
                    rec.released.wait(30)
                elif mode == "slow":
                    time.sleep(2.5)
                try:
                    self.send_response(500 if mode == "fail" else 204)
                    self.end_headers()
                except OSError:
                    pass  # the sender is gone (timed out or killed)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port or 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def posts(self):
        with self.lock:
            return list(self.got)

    def close(self):
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


def verify(secret, headers, body, max_age_s=300):
    """What a receiver does: recompute the signature over the raw body, compare in constant
    time, refuse an old timestamp."""
    parts = dict(p.split("=", 1) for p in headers["Ctxguard-Signature"].split(","))
    t = int(parts["t"])
    want = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(want, parts["v1"]) and abs(time.time() - t) < max_age_s


class Tenant:
    def __init__(self, srv):
        t = srv.create_tenant()
        self.id = t.tenant_id
        self.md = cgtest.bearer(srv.create_key(t.tenant_id).secret)
        self.stub = budget_pb2_grpc.BudgetServiceStub(srv.channel())

    def channel(self, url, kind=WEBHOOK, types=(WARNING,), prefix=None, md=None):
        return self.stub.CreateNotificationChannel(B.CreateNotificationChannelRequest(
            kind=kind, url=url, event_types=list(types), scope_prefix=prefix,
            description="e2e"), metadata=md or self.md, timeout=10)

    def warn(self, session, extra=0):
        """A WARNING event on session: 600 of 1000 tokens with warning_ratio 0.5."""
        self.stub.SetBudget(B.SetBudgetRequest(scope=scope(session), settings=B.BudgetSettings(
            limit_tokens=1000, warning_ratio=0.5)), metadata=self.md, timeout=10)
        self.stub.RecordUsage(B.RecordUsageRequest(
            scope=scope(session), usage=common_pb2.TokenUsage(input_tokens=600 + extra),
            idempotency_key="w-" + uuid.uuid4().hex), metadata=self.md, timeout=10)

    def deliveries(self, **kw):
        return list(self.stub.ListNotificationDeliveries(
            B.ListNotificationDeliveriesRequest(**kw), metadata=self.md,
            timeout=10).deliveries)


class Notify(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls, env=FAST)

    def setUp(self):
        self.t = Tenant(self.srv)
        self.s = "s-" + uuid.uuid4().hex[:8]
        self.rx = Receiver()
        self.addCleanup(self.rx.close)

    def wait_posts(self, n, rx=None, timeout=20):
        rx = rx or self.rx
        cgtest.wait_until(lambda: len(rx.posts()) >= n, timeout, f"{n} POSTs at the receiver "
                          f"(got {len(rx.posts())})")
        return rx.posts()

    def test_a_signed_webhook_carries_the_event_and_its_delivery_id(self):
        made = self.t.channel(self.rx.url)
        self.assertTrue(made.signing_secret.startswith("whsec_"))
        self.assertEqual(made.channel.url_hint, f"http://127.0.0.1:{self.rx.port}")
        self.t.warn(self.s)
        headers, body, _ = self.wait_posts(1)[0]
        self.assertTrue(verify(made.signing_secret, headers, body), headers)
        self.assertFalse(verify(made.signing_secret, headers, body + b" "))
        self.assertFalse(verify("whsec_other", headers, body))
        event = json.loads(body)
        self.assertEqual(event["type"], "WARNING")
        self.assertEqual(event["scope"], {"session_id": self.s, "task_id": "", "agent_id": ""})
        self.assertEqual((event["used_tokens"], event["limit_tokens"]), (600, 1000))
        self.assertEqual(event["tenant_id"], self.t.id)
        self.assertEqual(headers["Ctxguard-Delivery-Id"], event["delivery_id"])
        self.assertEqual(headers["Ctxguard-Delivery-Attempt"], "1")
        self.assertEqual(headers["Content-Type"], "application/json")
        cgtest.wait_until(lambda: [d.state for d in self.t.deliveries()] == [DELIVERED], 10,
                          "the delivery is DELIVERED")
        d = self.t.deliveries()[0]
        self.assertEqual((d.delivery_id, d.event_type, d.attempts, d.last_status),
                         (event["delivery_id"], WARNING, 1, 204))
        self.assertEqual(d.event_id, event["event_id"])
        # The secret is shown once: listing never has it.
        listed = self.t.stub.ListNotificationChannels(B.ListNotificationChannelsRequest(),
                                                      metadata=self.t.md, timeout=10).channels
        self.assertEqual([c.channel_id for c in listed], [made.channel.channel_id])
        self.assertNotIn(made.signing_secret, str(listed))

    def test_slack_gets_a_text_message(self):
        self.t.channel(self.rx.url + "/T000/B000/XXXX", kind=SLACK)
        self.t.warn(self.s)
        headers, body, _ = self.wait_posts(1)[0]
        self.assertNotIn("Ctxguard-Signature", headers)
        msg = json.loads(body)
        self.assertEqual(list(msg), ["text"])
        self.assertIn(f"WARNING on {self.s}", msg["text"])
        self.assertIn("600 of 1000 tokens used (60.0%)", msg["text"])

    def test_subscriptions_by_type_and_scope_prefix(self):
        other = Receiver()
        self.addCleanup(other.close)
        self.t.channel(self.rx.url, types=(EXHAUSTED,), prefix=scope(self.s))
        self.t.channel(other.url, types=(WARNING,), prefix=scope(self.s + "-b"))
        self.t.warn(self.s)  # WARNING in s: neither (type, prefix)
        self.t.warn(self.s + "-b")  # WARNING in s-b: the second
        self.t.stub.RecordUsage(B.RecordUsageRequest(
            scope=scope(self.s), usage=common_pb2.TokenUsage(input_tokens=500),
            idempotency_key="x"), metadata=self.t.md, timeout=10)  # EXHAUSTED in s: the first
        got = [json.loads(b) for _, b, _ in self.wait_posts(1)]
        self.assertEqual([(e["type"], e["scope"]["session_id"]) for e in got],
                         [("EXHAUSTED", self.s)])
        got = [json.loads(b) for _, b, _ in self.wait_posts(1, other)]
        self.assertEqual([(e["type"], e["scope"]["session_id"]) for e in got],
                         [("WARNING", self.s + "-b")])
        self.assertEqual(len(self.t.deliveries()), 2)

    def test_a_failing_receiver_is_retried_then_dead_then_redriven(self):
        self.rx.mode = "fail"
        self.t.channel(self.rx.url)
        self.t.warn(self.s)
        cgtest.wait_until(lambda: [d.state for d in self.t.deliveries()] == [DEAD], 20,
                          "the delivery is DEAD after 3 attempts")
        d = self.t.deliveries(state=DEAD)[0]
        self.assertEqual((d.attempts, d.last_status, d.last_error), (3, 500, "HTTP 500"))
        posts = self.rx.posts()
        self.assertEqual(len(posts), 3)
        self.assertEqual({h["Ctxguard-Delivery-Id"] for h, _, _ in posts}, {d.delivery_id})
        self.assertEqual([h["Ctxguard-Delivery-Attempt"] for h, _, _ in posts], ["1", "2", "3"])
        self.assertEqual(self.t.deliveries(state=PENDING), [])
        self.rx.mode = "ok"
        r = self.t.stub.RedriveNotificationDeliveries(B.RedriveNotificationDeliveriesRequest(
            delivery_ids=[d.delivery_id]), metadata=self.t.md, timeout=10)
        self.assertEqual(r.redriven, 1)
        cgtest.wait_until(lambda: [x.state for x in self.t.deliveries()] == [DELIVERED], 20,
                          "the re-driven delivery is DELIVERED")
        self.assertEqual(self.rx.posts()[-1][0]["Ctxguard-Delivery-Id"], d.delivery_id)
        # Nothing dead any more: all_dead finds nothing.
        r = self.t.stub.RedriveNotificationDeliveries(B.RedriveNotificationDeliveriesRequest(
            all_dead=True), metadata=self.t.md, timeout=10)
        self.assertEqual(r.redriven, 0)

    def test_a_receiver_that_is_down_gets_it_once_it_is_up(self):
        port = free_port()
        self.t.channel(f"http://127.0.0.1:{port}/hook")
        self.t.warn(self.s)
        cgtest.wait_until(lambda: any(d.attempts >= 1 and d.last_error
                                      for d in self.t.deliveries()), 20,
                          "a failed attempt on the closed port")
        self.assertEqual(self.t.deliveries()[0].last_status, 0)
        up = Receiver(port=port)
        self.addCleanup(up.close)
        posts = self.wait_posts(1, up)
        self.assertEqual(json.loads(posts[0][1])["type"], "WARNING")

    def test_a_slow_receiver_is_tried_again_with_the_same_delivery_id(self):
        self.rx.mode = "slow"
        self.t.channel(self.rx.url)
        self.t.warn(self.s)
        self.wait_posts(1)
        self.rx.mode = "ok"
        cgtest.wait_until(lambda: [d.state for d in self.t.deliveries()] == [DELIVERED], 20,
                          "delivered after the timed-out attempt")
        ids = [h["Ctxguard-Delivery-Id"] for h, _, _ in self.rx.posts()]
        self.assertEqual(len(ids), 2)
        self.assertEqual(len(set(ids)), 1)
        self.assertEqual(self.t.deliveries()[0].attempts, 2)

    def test_bad_requests_are_named(self):
        cases = [
            (dict(kind=0, url=self.rx.url), "kind"),
            (dict(kind=WEBHOOK, url="ftp://x/y"), "url"),
            (dict(kind=WEBHOOK, url="http:///nohost"), "url"),
            (dict(kind=WEBHOOK, url="http://a b/"), "url"),
            (dict(kind=WEBHOOK, url="http://user:pw@host/"), "url"),
            (dict(kind=WEBHOOK, url="http://h/" + "x" * 2100), "url"),
            (dict(kind=WEBHOOK, url=self.rx.url, event_types=[B.USAGE_EVENT_TYPE_USAGE_CHANGED]),
             "event_types[0]"),
            (dict(kind=WEBHOOK, url=self.rx.url, event_types=[999]), "event_types[0]"),
            (dict(kind=WEBHOOK, url=self.rx.url, scope_prefix=scope("s", "t", "a")),
             "scope_prefix.agent_id"),
            (dict(kind=WEBHOOK, url=self.rx.url, description="d" * 201), "description"),
        ]
        for kw, field in cases:
            with self.subTest(field=field, kw=str(kw)[:80]):
                self.assertRpcError(INVALID, self.t.stub.CreateNotificationChannel,
                                    B.CreateNotificationChannelRequest(**kw), metadata=self.t.md,
                                    timeout=10, contains=(field,))
        self.assertRpcError(grpc.StatusCode.NOT_FOUND, self.t.stub.DeleteNotificationChannel,
                            B.DeleteNotificationChannelRequest(channel_id=str(uuid.uuid4())),
                            metadata=self.t.md, timeout=10, contains=("channel_id",))
        self.assertRpcError(INVALID, self.t.stub.ListNotificationDeliveries,
                            B.ListNotificationDeliveriesRequest(page_token="zz"),
                            metadata=self.t.md, timeout=10, contains=("page_token",))
        self.assertRpcError(INVALID, self.t.stub.RedriveNotificationDeliveries,
                            B.RedriveNotificationDeliveriesRequest(), metadata=self.t.md,
                            timeout=10, contains=("delivery_ids",))

    def test_keys_bound_to_a_scope_and_viewers_are_refused(self):
        bound = cgtest.bearer(self.srv.create_key(self.t.id, role="operator",
                                                  scope=(self.s,)).secret)
        viewer = cgtest.bearer(self.srv.create_key(self.t.id, role="viewer").secret)
        operator = cgtest.bearer(self.srv.create_key(self.t.id, role="operator").secret)
        denied = grpc.StatusCode.PERMISSION_DENIED
        self.assertRpcError(denied, self.t.stub.ListNotificationChannels,
                            B.ListNotificationChannelsRequest(), metadata=bound, timeout=10,
                            contains=("bound",))
        self.assertRpcError(denied, self.t.stub.ListNotificationDeliveries,
                            B.ListNotificationDeliveriesRequest(), metadata=viewer, timeout=10)
        self.assertRpcError(denied, self.t.channel, self.rx.url, md=operator)
        # Another tenant sees none of this tenant's channels or deliveries.
        made = self.t.channel(self.rx.url)
        other = Tenant(self.srv)
        self.assertEqual(list(other.stub.ListNotificationChannels(
            B.ListNotificationChannelsRequest(), metadata=other.md, timeout=10).channels), [])
        self.assertRpcError(grpc.StatusCode.NOT_FOUND, other.stub.DeleteNotificationChannel,
                            B.DeleteNotificationChannelRequest(
                                channel_id=made.channel.channel_id),
                            metadata=other.md, timeout=10)

    def test_the_sweeper_deletes_deliveries_past_notify_keep_days(self):
        self.t.channel(self.rx.url)
        self.t.warn(self.s)
        self.t.warn(self.s + "-b")
        cgtest.wait_until(lambda: [d.state for d in self.t.deliveries()] == [DELIVERED] * 2, 20,
                          "two deliveries DELIVERED")
        old = self.t.deliveries()[0].delivery_id
        cgtest.psql(f"UPDATE notification_outbox SET created_at = now() - interval '8 days'"
                    f" WHERE delivery_id = '{old}'", self.srv.dsn)
        cgtest.wait_until(lambda: len(self.t.deliveries()) == 1, 20,
                          "the 8-day-old delivery is deleted (notify_keep_days 7)")
        self.assertNotEqual(self.t.deliveries()[0].delivery_id, old)

    def test_channel_changes_and_redrives_are_audited(self):
        from cgtest import admin_pb2
        admin = self.srv.admin()

        def events(kind):
            return list(admin.ListAuditEvents(admin_pb2.ListAuditEventsRequest(
                tenant_id=self.t.id, kind=kind), metadata=self.srv.admin_md(),
                timeout=10).events)

        self.rx.mode = "fail"
        made = self.t.channel(self.rx.url + "/secret/path", prefix=scope(self.s))
        cid = made.channel.channel_id
        created = events("notification_channel_created")
        self.assertEqual([e.target for e in created], [cid])
        after = json.loads(created[0].after_json)
        self.assertEqual((after["kind"], after["url_host"], after["event_types"]),
                         ("webhook", f"http://127.0.0.1:{self.rx.port}", [WARNING]))
        self.assertEqual(created[0].scope.session_id, self.s)
        self.assertNotIn("secret/path", created[0].after_json)
        self.assertNotIn(made.signing_secret, created[0].after_json)
        self.t.warn(self.s)
        cgtest.wait_until(lambda: [d.state for d in self.t.deliveries()] == [DEAD], 20, "DEAD")
        d = self.t.deliveries()[0]
        r = self.t.stub.RedriveNotificationDeliveries(B.RedriveNotificationDeliveriesRequest(
            all_dead=True), metadata=self.t.md, timeout=10)
        self.assertEqual(r.redriven, 1)
        redriven = events("notification_deliveries_redriven")
        self.assertEqual(len(redriven), 1)
        self.assertEqual(json.loads(redriven[0].after_json),
                         {"redriven": 1, "delivery_ids": [d.delivery_id]})
        # A re-drive that finds nothing dead writes no row.
        self.t.stub.RedriveNotificationDeliveries(B.RedriveNotificationDeliveriesRequest(
            delivery_ids=[str(uuid.uuid4())]), metadata=self.t.md, timeout=10)
        self.assertEqual(len(events("notification_deliveries_redriven")), 1)
        self.t.stub.DeleteNotificationChannel(B.DeleteNotificationChannelRequest(
            channel_id=cid), metadata=self.t.md, timeout=10)
        deleted = events("notification_channel_deleted")
        self.assertEqual([e.target for e in deleted], [cid])
        self.assertEqual(json.loads(deleted[0].before_json)["kind"], "webhook")

    def test_deleting_a_channel_drops_what_it_had_not_delivered(self):
        self.rx.mode = "fail"
        made = self.t.channel(self.rx.url)
        self.t.warn(self.s)
        cgtest.wait_until(lambda: self.t.deliveries() != [], 10, "a delivery")
        r = self.t.stub.DeleteNotificationChannel(B.DeleteNotificationChannelRequest(
            channel_id=made.channel.channel_id), metadata=self.t.md, timeout=10)
        self.assertEqual(r.dropped_deliveries, 1)
        self.assertEqual(self.t.deliveries(), [])


class Replicas(cgtest.TestCase):
    """Two servers on one database."""

    def setUp(self):
        self.a = cgtest.start_server(self, env=FAST)
        self.t = Tenant(self.a)
        self.s = "s-" + uuid.uuid4().hex[:8]
        self.rx = Receiver()
        self.addCleanup(self.rx.close)

    def test_a_replica_killed_mid_delivery_loses_nothing(self):
        self.rx.mode = "hold"
        self.t.channel(self.rx.url)
        self.t.warn(self.s)
        self.assertTrue(self.rx.holding.wait(20), "the first attempt reaches the receiver")
        self.a.proc.send_signal(signal.SIGKILL)
        self.a.proc.wait(10)
        self.rx.mode = "ok"
        self.rx.released.set()
        b = cgtest.start_server(self, env=FAST, schema=self.a.schema)
        cgtest.wait_until(lambda: len(self.rx.posts()) >= 2, 30,
                          "the other replica sends it again once the lease runs out")
        ids = [h["Ctxguard-Delivery-Id"] for h, _, _ in self.rx.posts()]
        self.assertEqual(len(set(ids)), 1, ids)
        stub = budget_pb2_grpc.BudgetServiceStub(b.channel())

        def states():
            return [(d.state, d.attempts) for d in stub.ListNotificationDeliveries(
                B.ListNotificationDeliveriesRequest(), metadata=self.t.md,
                timeout=10).deliveries]

        cgtest.wait_until(lambda: states() == [(DELIVERED, 2)], 10,
                          "one delivery, DELIVERED at its second attempt")

    def test_two_replicas_deliver_every_event_once(self):
        b = cgtest.start_server(self, env=FAST, schema=self.a.schema)
        self.t.channel(self.rx.url)
        sessions = [f"{self.s}-{i}" for i in range(20)]
        for s in sessions:
            self.t.warn(s)
        posts = self.wait_posts(20)
        self.assertEqual(sorted(json.loads(body)["scope"]["session_id"] for _, body, _ in posts),
                         sorted(sessions))
        # Each sent once: a second sending would have counted a second attempt.
        cgtest.wait_until(lambda: sorted((d.state, d.attempts) for d in self.t.deliveries())
                          == [(DELIVERED, 1)] * 20, 10, "20 deliveries DELIVERED at attempt 1")
        ids = [h["Ctxguard-Delivery-Id"] for h, _, _ in self.rx.posts()]
        self.assertEqual(len(ids), len(set(ids)), "a delivery id twice without a failure")
        self.assertTrue(b.running)

    def wait_posts(self, n, timeout=30):
        cgtest.wait_until(lambda: len(self.rx.posts()) >= n, timeout, f"{n} POSTs")
        return self.rx.posts()


class ProxyVariables(cgtest.TestCase):
    """A webhook goes straight to its receiver even when the server's environment names a
    proxy (curl would use it by default, and the private-address check would then see the
    proxy's address, not the receiver's)."""

    def test_a_proxy_in_the_environment_is_not_used(self):
        dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
        env = dict(FAST, http_proxy=dead, HTTP_PROXY=dead, https_proxy=dead,
                   HTTPS_PROXY=dead, all_proxy=dead, ALL_PROXY=dead)
        srv = cgtest.start_server(self, env=env)
        rx = Receiver()
        self.addCleanup(rx.close)
        t = Tenant(srv)
        t.channel(rx.url)
        t.warn("s-" + uuid.uuid4().hex[:8])
        cgtest.wait_until(lambda: len(rx.posts()) == 1, 20, "the POST at the receiver")
        cgtest.wait_until(lambda: [d.state for d in t.deliveries()] == [DELIVERED], 10,
                          "the delivery is DELIVERED")


class PrivateAddresses(cgtest.TestCase):
    """By default a webhook may not reach the server's own networks."""

    @classmethod
    def setUpClass(cls):
        env = dict(FAST)
        env.pop("CTXGUARD_NOTIFY_ALLOW_PRIVATE_ADDRESSES")
        cls.srv = cgtest.start_class_server(cls, env=env)

    def test_loopback_is_refused_and_says_why(self):
        rx = Receiver()
        self.addCleanup(rx.close)
        t = Tenant(self.srv)
        t.channel(rx.url)
        t.warn("s-" + uuid.uuid4().hex[:8])
        cgtest.wait_until(lambda: any(d.attempts >= 1 for d in t.deliveries()), 20,
                          "an attempt")
        d = t.deliveries()[0]
        self.assertIn("refused", d.last_error)
        self.assertIn("notify_allow_private_addresses", d.last_error)
        self.assertEqual(rx.posts(), [])


class Ctl(cgtest.TestCase):
    """`ctxguardctl notify ...` (the real binary) against a real server: the webhook channel
    it adds delivers signed events that its secret verifies, listings, re-drive of dead
    deliveries, delete, --json, and usage errors (exit 2) that name the option."""

    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls, env=FAST)

    def setUp(self):
        self.t = Tenant(self.srv)
        self.key = dict(self.t.md)["authorization"].split(" ", 1)[1]
        self.s = "s-" + uuid.uuid4().hex[:8]
        self.rx = Receiver()
        self.addCleanup(self.rx.close)

    def ctl(self, *args, expect=0):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CTXGUARD_")}
        env["CTXGUARD_TARGET"] = self.srv.target
        env["CTXGUARD_KEY"] = self.key
        proc = subprocess.run([cgtest.require_env("CG_CTL_BIN")] + list(args), env=env,
                              capture_output=True, text=True, timeout=30)
        self.assertEqual(proc.returncode, expect,
                         f"ctxguardctl {' '.join(args)}: exit {proc.returncode}\n"
                         f"stdout: {proc.stdout}\nstderr: {proc.stderr}")
        return proc

    @staticmethod
    def fields(out):
        """The `label: value` lines of a command's output as a dict."""
        return dict(re.match(r"^(\w+):\s+(.*)$", line).groups()
                    for line in out.splitlines() if re.match(r"^\w+:\s", line))

    @staticmethod
    def rows(out):
        """The cells of a table's rows (the header line left out)."""
        return [re.split(r"\s{2,}", line.strip()) for line in out.splitlines()[1:]
                if line.strip() and not line.startswith("next page:")]

    def test_add_list_deliver_delete(self):
        out = self.ctl("notify", "add", "--webhook", self.rx.url, "--events", "warning",
                       "--scope", self.s, "--description", "ops-room").stdout
        got = self.fields(out)
        cid, secret = got["channel_id"], got["secret"]
        self.assertEqual((got["kind"], got["url_hint"], got["events"], got["scope"],
                          got["description"]),
                         ("webhook", f"http://127.0.0.1:{self.rx.port}", "warning", self.s,
                          "ops-room"))
        self.assertTrue(secret.startswith("whsec_"), out)
        self.assertIn("shown only this once", out)

        listed = self.ctl("notify", "list").stdout
        self.assertEqual(self.rows(listed), [[cid, "webhook", f"http://127.0.0.1:{self.rx.port}",
                                              "warning", self.s, "ops-room"]])
        self.assertNotIn(secret, listed)
        self.assertEqual(json.loads(self.ctl("--json", "notify", "list").stdout)["channels"][0]
                         ["event_types"], ["USAGE_EVENT_TYPE_WARNING"])

        # Outside the scope prefix: no delivery is made (in the event's own transaction).
        self.t.warn(self.s + "-other")
        self.t.warn(self.s)
        headers, body, _ = self.wait_posts(1)[0]
        self.assertTrue(verify(secret, headers, body), "the printed secret signs the delivery")
        self.assertEqual(json.loads(body)["scope"]["session_id"], self.s)

        def delivered():
            return [r[3] for r in self.rows(self.ctl("notify", "deliveries").stdout)]

        cgtest.wait_until(lambda: delivered() == ["delivered"], 20, "one delivery, delivered")
        [row] = self.rows(self.ctl("notify", "deliveries", "--channel", cid).stdout)
        self.assertEqual(row[:6], [headers["Ctxguard-Delivery-Id"], cid, "warning", "delivered",
                                   "1", "204"])
        self.assertRegex(row[6], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
        self.assertEqual(row[7], "-")
        self.assertEqual(self.rows(self.ctl("notify", "deliveries", "--state", "dead").stdout), [])

        out = self.ctl("notify", "delete", cid).stdout
        self.assertIn(f"deleted webhook channel {cid}", out)
        self.assertIn("dropped 0 undelivered", out)
        self.assertEqual(self.rows(self.ctl("notify", "list").stdout), [])
        self.assertIn("NOT_FOUND", self.ctl("notify", "delete", cid, expect=1).stderr)

    def test_a_dead_delivery_is_redriven_with_all_dead(self):
        self.rx.mode = "fail"
        made = json.loads(self.ctl("--json", "notify", "add", "--webhook", self.rx.url,
                                   "--events", "warning").stdout)
        cid, secret = made["channel"]["channel_id"], made["signing_secret"]
        self.t.warn(self.s)
        self.t.warn(self.s + "-b")

        def dead():
            return json.loads(self.ctl("--json", "notify", "deliveries", "--state", "dead",
                                       "--channel", cid).stdout)["deliveries"]

        cgtest.wait_until(lambda: len(dead()) == 2, 30, "two deliveries DEAD after 3 attempts")
        self.assertEqual({(d["attempts"], d["last_status"], d["last_error"]) for d in dead()},
                         {(3, 500, "HTTP 500")})
        rows = self.rows(self.ctl("notify", "deliveries", "--state", "dead").stdout)
        self.assertEqual([r[3:6] + r[7:] for r in rows], [["dead", "3", "500", "HTTP 500"]] * 2)

        # One per page: the first page names the token of the second.
        first = self.ctl("notify", "deliveries", "--page-size", "1").stdout
        token = re.search(r"^next page: --page-token (\S+)$", first, re.M).group(1)
        second = self.ctl("notify", "deliveries", "--page-size", "1", "--page-token", token)
        ids = {self.rows(first)[0][0], self.rows(second.stdout)[0][0]}
        self.assertEqual(ids, {d["delivery_id"] for d in dead()})

        self.rx.mode = "ok"
        out = self.ctl("notify", "redrive", "--all-dead", "--channel", cid).stdout
        self.assertEqual(out, "2 dead deliveries made pending again\n")
        cgtest.wait_until(lambda: sorted(d.state for d in self.t.deliveries()) == [DELIVERED] * 2,
                          20, "the re-driven deliveries are DELIVERED")
        ok = [(h, b) for h, b, mode in self.rx.posts() if mode == "ok"]
        self.assertEqual({h["Ctxguard-Delivery-Id"] for h, _ in ok}, ids)
        self.assertTrue(all(verify(secret, h, b) for h, b in ok))
        # Nothing dead any more: by id or all, nothing is re-driven.
        again = json.loads(self.ctl("--json", "notify", "redrive", *sorted(ids)).stdout)
        self.assertEqual(again, {"redriven": 0})
        self.assertIn("0 dead deliveries", self.ctl("notify", "redrive", "--all-dead").stdout)

    def test_a_slack_channel_has_no_secret_and_the_defaults(self):
        out = self.ctl("notify", "add", "--slack", self.rx.url + "/T000/B000/XXXX").stdout
        got = self.fields(out)
        self.assertEqual((got["kind"], got["events"], got["scope"]), ("slack", "default", "tenant"))
        self.assertNotIn("secret", out)
        self.assertNotIn("XXXX", self.ctl("notify", "list").stdout)
        self.assertEqual(json.loads(self.ctl("--json", "notify", "delete", got["channel_id"])
                                    .stdout)["dropped_deliveries"], 0)

    def test_usage_errors_name_the_option(self):
        cases = [
            (("notify", "add", "--webhook", self.rx.url, "--events", "warning,bogus"),
             ("--events", "'bogus'")),
            (("notify", "add", "--webhook", self.rx.url, "--events", "usage_changed"),
             ("--events", "'usage_changed'")),
            (("notify", "add", "--events", "warning"), ("--webhook", "--slack")),
            (("notify", "add", "--webhook", self.rx.url, "--slack", self.rx.url),
             ("--webhook", "--slack")),
            (("notify", "add", "--webhook", self.rx.url, "--scope", "s/t/a"), ("--scope",)),
            (("notify", "redrive"), ("DELIVERY_ID", "--all-dead")),
            (("notify", "redrive", str(uuid.uuid4()), "--channel", str(uuid.uuid4())),
             ("--channel", "--all-dead")),
            (("notify", "deliveries", "--state", "lost"), ("--state", "'lost'")),
            (("notify", "deliveries", "--page-size", "0"), ("--page-size",)),
        ]
        for args, names in cases:
            with self.subTest(args=args):
                err = self.ctl(*args, expect=2).stderr
                for name in names:
                    self.assertIn(name, err)
        self.assertEqual(list(self.t.stub.ListNotificationChannels(
            B.ListNotificationChannelsRequest(), metadata=self.t.md, timeout=10).channels), [],
            "a usage error creates nothing")
        # What only the server checks comes back as its status (exit 1).
        err = self.ctl("notify", "add", "--webhook", "ftp://x/y", expect=1).stderr
        self.assertIn("INVALID_ARGUMENT", err)
        self.assertIn("url", err)

    def wait_posts(self, n, timeout=20):
        cgtest.wait_until(lambda: len(self.rx.posts()) >= n, timeout, f"{n} POSTs")
        return self.rx.posts()


class Metrics(cgtest.TestCase):
    """/metrics counts what the ledger recorded (tokens by kind, cost) and what the notifier
    sent."""

    def test_spend_and_deliveries_are_counted(self):
        from test_http import get, http_port, sample
        srv = cgtest.start_server(self, env=dict(FAST, CTXGUARD_HTTP_LISTEN="127.0.0.1:0"))
        port = http_port(srv)
        t = Tenant(srv)
        rx = Receiver()
        self.addCleanup(rx.close)
        rx.mode = "fail"
        t.channel(rx.url)
        session = "s-" + uuid.uuid4().hex[:8]
        t.warn(session)  # 600 input tokens, then a failing delivery
        t.stub.RecordUsage(B.RecordUsageRequest(
            scope=scope(session), idempotency_key="m",
            usage=common_pb2.TokenUsage(input_tokens=5, output_tokens=7, cache_read_tokens=11,
                                        cache_write_tokens=13, cost_micros=4242)),
            metadata=t.md, timeout=10)
        cgtest.wait_until(lambda: [d.state for d in t.deliveries()] == [DEAD], 20, "DEAD")

        def value(name, labels=""):
            text = get(port, "/metrics")[2]
            if labels:
                return sample(text, name, labels)
            m = re.search(r"^" + re.escape(name) + r" (\S+)$", text, re.M)
            return float(m.group(1)) if m else None

        self.assertEqual(value("ctxguard_usage_tokens_total", 'kind="input"'), 605)
        self.assertEqual(value("ctxguard_usage_tokens_total", 'kind="output"'), 7)
        self.assertEqual(value("ctxguard_usage_tokens_total", 'kind="cache_read"'), 11)
        self.assertEqual(value("ctxguard_usage_tokens_total", 'kind="cache_write"'), 13)
        self.assertEqual(value("ctxguard_usage_cost_micros_total"), 4242)
        self.assertEqual(value("ctxguard_notify_deliveries_total", 'result="retried"'), 2)
        self.assertEqual(value("ctxguard_notify_deliveries_total", 'result="dead"'), 1)
        rx.mode = "ok"
        t.stub.RedriveNotificationDeliveries(B.RedriveNotificationDeliveriesRequest(
            all_dead=True), metadata=t.md, timeout=10)
        cgtest.wait_until(
            lambda: value("ctxguard_notify_deliveries_total", 'result="delivered"') == 1, 20,
            "the re-driven delivery counted as delivered")


class SlowReceiver(cgtest.TestCase):
    """A receiver that holds its request holds one notifier thread, not the others."""

    def test_another_channel_is_served_while_one_receiver_holds(self):
        srv = cgtest.start_server(self, env=dict(FAST, CTXGUARD_NOTIFY_TIMEOUT_MS="20000",
                                                 CTXGUARD_NOTIFY_THREADS="2"))
        t = Tenant(srv)
        held, quick = Receiver(mode="hold"), Receiver()
        self.addCleanup(quick.close)
        self.addCleanup(held.close)
        s1, s2 = "s-" + uuid.uuid4().hex[:8], "s-" + uuid.uuid4().hex[:8]
        t.channel(held.url, prefix=scope(s1))
        t.channel(quick.url, prefix=scope(s2))
        t.warn(s1)
        self.assertTrue(held.holding.wait(20), "the first delivery reaches the holding receiver")
        t.warn(s2)
        cgtest.wait_until(lambda: len(quick.posts()) == 1, 10,
                          "the other channel's delivery while the first is held")
        self.assertEqual(len(held.posts()), 1)
        self.assertFalse(held.released.is_set())
        held.released.set()
