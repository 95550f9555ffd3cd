"""The operators' console (server/console/, served at / by transport/http_console.c) in a real
headless Chromium (Debian's chromium, chromium-driver and python3-selenium), used as a person
would: a key typed in, the budget tree of traffic this test made over gRPC, a live update
arriving without a reload through the page's event stream (WatchUsage as Server-Sent Events),
that stream reopened after the network cut it (with the events missed meanwhile) and after a
new sign-in (one stream, never two), an approval approved in the page (and refused to a viewer), a
hostile session id shown as text, the CSP on the answer, the key in sessionStorage only.
Screenshots go to $CG_TEST_RUN_DIR (else a temporary directory); their paths are printed."""

import os
import re
import tempfile
import urllib.request
import uuid

from selenium import webdriver
from selenium.common.exceptions import (NoAlertPresentException, StaleElementReferenceException,
                                        TimeoutException)
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

import cgtest
from cgtest import budget_pb2, budget_pb2_grpc, common_pb2, context_pb2 as C, context_pb2_grpc
from test_http import http_port
from test_sessions import chat_with_results

B = budget_pb2
# Every wait on the page, unless it says otherwise: while the event stream is open a budget
# event brings a refresh at once and everything is re-read every 30 s (compression savings,
# which no budget event announces, may take that long); while it is down, every 2 s.
WAIT_S = 45
# What an event must bring to the page: well under the 30 s resynchronisation, so that only
# the event stream can have brought it (a functional bound, not a timing measurement).
EVENT_WAIT_S = 10


def scope(session="", task="", agent=""):
    return common_pb2.Scope(session_id=session, task_id=task, agent_id=agent)


def make_driver():
    opts = Options()
    opts.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1000", "--no-first-run", "--disable-extensions"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)


class Console(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls, env={"CTXGUARD_HTTP_LISTEN": "127.0.0.1:0"})
        cls.port = http_port(cls.srv)
        cls.url = f"http://127.0.0.1:{cls.port}/"
        run_dir = os.environ.get("CG_TEST_RUN_DIR")
        if run_dir:
            cls.shot_dir = run_dir
        else:
            tmp = tempfile.TemporaryDirectory(prefix="cg_console_")
            cls.addClassCleanup(tmp.cleanup)
            cls.shot_dir = tmp.name
        cls.d = make_driver()
        cls.addClassCleanup(cls.d.quit)

    def setUp(self):
        t = self.srv.create_tenant()
        self.tenant = t.tenant_id
        self.tenant_name = t.name
        self.keys = {role: self.srv.create_key(t.tenant_id, role=role).secret
                     for role in ("agent", "viewer", "operator", "admin")}
        self.md = cgtest.bearer(self.keys["admin"])
        self.stub = budget_pb2_grpc.BudgetServiceStub(self.srv.channel())
        self.ctx = context_pb2_grpc.ContextServiceStub(self.srv.channel())
        self.s = "s-" + uuid.uuid4().hex[:8]
        # A fresh page with nothing in its sessionStorage (the tab outlives a test).
        self.d.get(self.url)
        self.d.execute_script("sessionStorage.clear()")
        self.d.get(self.url)
        self.wait_for(lambda d: d.find_element(By.ID, "key").is_displayed(), "the sign-in form")
        self.d.get_log("browser")  # drop what earlier tests logged

    # ------------------------------------------------------------------ helpers ----

    def wait_for(self, condition, what, timeout=WAIT_S):
        try:
            # An element the page replaced between two reads is read again at the next poll.
            return WebDriverWait(self.d, timeout, poll_frequency=0.1,
                                 ignored_exceptions=(StaleElementReferenceException,)
                                 ).until(condition)
        except TimeoutException:
            errors = self.d.find_elements(By.ID, "error")
            shown = errors[0].text if errors else ""
            self.fail(f"waited {timeout} s for {what}; the page's #error: {shown!r}")

    def shot(self, name):
        path = os.path.join(self.shot_dir, f"console-{self._testMethodName}-{name}.png")
        self.assertTrue(self.d.save_screenshot(path), path)
        print(f"screenshot: {path}")

    def text(self, element_id):
        return self.d.find_element(By.ID, element_id).text

    def sign_in(self, key):
        box = self.d.find_element(By.ID, "key")
        box.clear()
        box.send_keys(key)
        self.d.find_element(By.ID, "signin").click()

    def sign_in_ok(self, key, role):
        self.sign_in(key)
        self.wait_for(lambda d: "role " + role in d.find_element(By.ID, "whoami").text,
                      f"#whoami to show role {role}")
        self.assertTrue(self.d.find_element(By.ID, "main").is_displayed())

    def sign_out(self):
        self.d.find_element(By.ID, "signout").click()
        self.wait_for(lambda d: d.find_element(By.ID, "key").is_displayed(), "the sign-in form")
        self.assertIsNone(self.d.execute_script(
            "return sessionStorage.getItem('ctxguard.console.key')"))

    def live(self):
        """#live's data attributes: stream ("open"/"closed"), events (events other than
        heartbeats since sign-in), streamOpens (streams opened since the page loaded),
        streamsInFlight (stream requests not finished)."""
        return self.d.execute_script(
            "return Object.assign({}, document.getElementById('live').dataset)")

    def wait_stream_open(self):
        self.wait_for(lambda d: self.live().get("stream") == "open", "the event stream to open")
        self.assertTrue(self.text("live").startswith("live · stream · updated "),
                        self.text("live"))

    def node(self, path):
        """The tree's node of a scope ("session/task/agent"), or None; compares the attribute
        itself, so that any id (quotes and all) can be looked for. One script, so that a
        refresh cannot remove a node between the lookup and the comparison."""
        return self.d.execute_script(
            "return [...document.querySelectorAll('#tree li.node')]"
            ".find((e) => e.dataset.scope === arguments[0]) || null", path)

    def node_text(self, path, cls):
        """The text of the node's own .cls (not its children's), or None while absent."""
        n = self.node(path)
        if n is None:
            return None
        found = n.find_elements(By.CSS_SELECTOR, ":scope > .row ." + cls)
        return found[0].text if found else None

    def approval_row(self, aid):
        found = self.d.find_elements(By.CSS_SELECTOR, f'#approvals tr[data-approval-id="{aid}"]')
        return found[0] if found else None

    def spend(self, tokens, *ids):
        self.stub.RecordUsage(B.RecordUsageRequest(
            scope=scope(*ids), usage=common_pb2.TokenUsage(input_tokens=tokens),
            idempotency_key="k-" + uuid.uuid4().hex), metadata=self.md, timeout=10)

    def assert_no_alert(self):
        try:
            alert = self.d.switch_to.alert
            text = alert.text
            alert.dismiss()
            self.fail(f"an alert ran: {text!r}")
        except NoAlertPresentException:
            pass

    def assert_no_csp_violation(self):
        bad = [e["message"] for e in self.d.get_log("browser")
               if e.get("level") == "SEVERE"
               and ("Content Security Policy" in e["message"] or "Refused" in e["message"]
                    or "Uncaught" in e["message"])]
        self.assertEqual(bad, [], "the page broke its CSP or threw")

    # ------------------------------------------------------------------ tests ------

    def test_signs_in_sees_the_usage_and_a_live_update(self):
        for ids, settings in (
                ((self.s,), B.BudgetSettings(limit_tokens=10000)),
                ((self.s, "t"), B.BudgetSettings(limit_tokens=5000, mode=B.BUDGET_MODE_SOFT)),
                ((self.s, "t", "a"), B.BudgetSettings(limit_tokens=2000, backpressure_tiers=[
                    B.BackpressureTier(threshold_ratio=0.8, delay_ms=250)]))):
            self.stub.SetBudget(B.SetBudgetRequest(scope=scope(*ids), settings=settings),
                                metadata=self.md, timeout=10)
        self.spend(1234, self.s, "t", "a")

        self.sign_in_ok(self.keys["admin"], "admin")
        who = self.text("whoami")
        self.assertIn(self.tenant, who)
        self.assertIn(self.tenant_name, who)
        # The key: in this tab's sessionStorage, in no cookie, not left in the field.
        self.assertEqual(self.d.execute_script(
            "return sessionStorage.getItem('ctxguard.console.key')"), self.keys["admin"])
        self.assertEqual(self.d.execute_script("return localStorage.length"), 0)
        self.assertEqual(self.d.get_cookies(), [])
        self.assertEqual(self.d.find_element(By.ID, "key").get_attribute("value"), "")
        self.assertNotIn(self.keys["admin"], self.d.current_url)

        # tenant -> session -> task -> agent, each with its figures and its parent's remaining.
        self.wait_for(lambda d: self.node_text(f"{self.s}/t/a", "used") == "1,234",
                      "the agent's usage in the tree")
        self.assertIsNotNone(self.node(""), "the tenant's node")
        self.assertEqual(self.node_text(self.s, "used"), "1,234")
        self.assertEqual(self.node_text(self.s, "limit"), "10,000")
        self.assertEqual(self.node_text(self.s, "ratio"), "12.3 %")
        self.assertEqual(self.node_text(self.s, "mode"), "mode hard")
        self.assertEqual(self.node_text(self.s, "delay"), "no backpressure")
        self.assertEqual(self.node_text(f"{self.s}/t", "mode"), "mode soft")
        self.assertEqual(self.node_text(f"{self.s}/t", "parent"), "parent remaining 8,766")
        self.assertEqual(self.node_text(f"{self.s}/t/a", "parent"), "parent remaining 3,766")
        self.assertEqual(self.node_text(f"{self.s}/t/a", "delay"), "no backpressure")
        self.assertEqual(self.node_text(self.s, "parent"), "parent has no budget")
        bar = self.node(self.s).find_element(By.CSS_SELECTOR, ":scope > .row .used-fill")
        self.assertAlmostEqual(bar.size["width"] / bar.find_element(By.XPATH, "..").size["width"],
                               0.1234, delta=0.02)
        # The session in the list of sessions.
        self.wait_for(lambda d: self.s in d.find_element(By.ID, "sessions").text,
                      "the session in the list")
        self.shot("tree")

        # A live update: more spend over gRPC, the page changes without a reload, brought by
        # the event stream (its events count goes up) well before a resynchronisation.
        self.wait_stream_open()
        events = int(self.live()["events"])
        self.d.execute_script("window.cgNoReload = 42")
        self.spend(500, self.s, "t", "a")
        self.wait_for(lambda d: int(self.live()["events"]) > events,
                      "an event of the new spend on the page's stream", EVENT_WAIT_S)
        self.wait_for(lambda d: self.node_text(self.s, "used") == "1,734",
                      "the session's usage to follow the new spend", EVENT_WAIT_S)
        self.assertEqual(self.node_text(f"{self.s}/t/a", "used"), "1,734")
        self.assertEqual(self.node_text(f"{self.s}/t", "parent"), "parent remaining 8,266")
        # The agent is past its 80 % tier now: its backpressure delay shows.
        self.assertEqual(self.node_text(f"{self.s}/t/a", "delay"), "backpressure 250 ms")
        self.assertEqual(self.node_text(f"{self.s}/t/a", "ratio"), "86.7 %")
        self.assertEqual(self.d.execute_script("return window.cgNoReload"), 42,
                         "the page was reloaded")
        self.assertEqual(self.live()["stream"], "open")
        self.assertEqual(self.live()["streamOpens"], "1", "the stream was reopened")

        # Spend over time and compression for the session, chosen in the tree: first a
        # session without Compress calls, then one whose Compress offloaded two tool results.
        self.node(self.s).find_element(By.CSS_SELECTOR, ":scope > .row button.chart").click()
        self.wait_for(lambda d: d.find_element(By.ID, "compression-scope").text
                      == f"session {self.s}", "the compression panel's session")
        self.assertIn("No Compress call", self.text("compression"))
        self.ctx.Compress(C.CompressRequest(conversation=chat_with_results(2, "console"), model="gpt-4o",
                                            session_id=self.s, force=True,
                                            context_window_tokens=20000),
                          metadata=self.md, timeout=60)
        stats = self.ctx.GetCompressionStats(C.GetCompressionStatsRequest(session_id=self.s),
                                             metadata=self.md, timeout=10)
        self.assertGreater(stats.tokens_saved, 0)
        self.wait_for(lambda d: d.find_elements(By.CSS_SELECTOR, "#compression dd.saved")
                      and d.find_element(By.CSS_SELECTOR, "#compression dd.saved").text
                      .startswith(f"{stats.tokens_saved:,} ("), "the session's savings")
        self.assertEqual(self.d.find_element(By.CSS_SELECTOR, "#compression dd.calls").text,
                         "1 (1 over the trigger)")
        self.wait_for(lambda d: d.find_element(By.ID, "history-scope").text
                      == f"session {self.s}", "the chart's scope")
        self.wait_for(lambda d: "2 calls, input 1,734" in d.find_element(By.ID, "history-total").text,
                      "the session's history totals")
        self.assertTrue(self.d.find_elements(By.CSS_SELECTOR, "#history .uplot canvas"),
                        "uPlot drew no canvas")
        for step in ("hour", "day"):
            self.d.find_element(By.CSS_SELECTOR, f'#history-step option[value="{step}"]').click()
            self.wait_for(lambda d: d.find_element(By.ID, "history-total").text.startswith(
                "per " + step), f"the {step} steps")
            self.assertIn("input 1,734", self.text("history-total"))
        self.shot("history")

        # Opening the session alone: its tree, the tenant's remaining beside it.
        self.node(self.s).find_element(By.CSS_SELECTOR, ":scope > .row button.open").click()
        self.wait_for(lambda d: self.node("") is None and self.node(self.s) is not None,
                      "the session at the tree's root")
        self.assertEqual(self.node_text(self.s, "parent"), "parent has no budget")
        self.d.find_element(By.ID, "tree-up").click()
        self.wait_for(lambda d: self.node("") is not None, "the tenant back at the root")
        self.assert_no_csp_violation()

        self.sign_out()
        self.assertEqual(self.d.find_elements(By.CSS_SELECTOR, "#tree li.node"), [])
        self.assertEqual(self.text("whoami"), "")

    def test_the_stream_is_reopened_after_a_network_cut_with_what_it_missed(self):
        # The page through a TCP proxy that can cut every connection and refuse new ones.
        self.stub.SetBudget(B.SetBudgetRequest(scope=scope(self.s), settings=B.BudgetSettings(
            limit_tokens=100000)), metadata=self.md, timeout=10)
        proxy = cgtest.TcpProxy("127.0.0.1", self.port)
        self.addCleanup(proxy.close)
        self.d.get(f"http://127.0.0.1:{proxy.port}/")
        self.wait_for(lambda d: d.find_element(By.ID, "key").is_displayed(), "the sign-in form")
        self.sign_in_ok(self.keys["viewer"], "viewer")
        self.wait_stream_open()
        self.spend(100, self.s)
        self.wait_for(lambda d: self.node_text(self.s, "used") == "100", "the first spend",
                      EVENT_WAIT_S)
        self.wait_for(lambda d: int(self.live()["events"]) > 0, "the first spend's event")
        opens = int(self.live()["streamOpens"])
        events = int(self.live()["events"])

        proxy.cut()
        self.wait_for(lambda d: self.live()["stream"] == "closed", "the stream to be seen down")
        self.assertTrue(self.text("live").startswith("polling"), self.text("live"))
        self.assertEqual(self.live()["streamsInFlight"], "0")
        # Spend the page cannot hear of: its event reaches the page only when the reopened
        # stream sends back the last event's id and the server replays what came after.
        self.spend(250, self.s)
        self.shot("cut")
        proxy.restore()
        self.wait_for(lambda d: self.live()["stream"] == "open", "the stream to reopen")
        self.assertEqual(int(self.live()["streamOpens"]), opens + 1)
        # Nothing happens after the restore: more events can only be the replay.
        self.wait_for(lambda d: int(self.live()["events"]) > events,
                      "the missed event, replayed", EVENT_WAIT_S)
        self.wait_for(lambda d: self.node_text(self.s, "used") == "350", "the missed spend")
        # ... and it follows new spend again.
        events = int(self.live()["events"])
        self.spend(50, self.s)
        self.wait_for(lambda d: int(self.live()["events"]) > events,
                      "the next spend's event after the reconnection", EVENT_WAIT_S)
        self.wait_for(lambda d: self.node_text(self.s, "used") == "400",
                      "the next spend after the reconnection", EVENT_WAIT_S)
        self.wait_for(lambda d: not d.find_element(By.ID, "error").is_displayed(),
                      "the error of the cut to go")
        self.assertEqual(int(self.live()["streamOpens"]), opens + 1)
        self.assertEqual(self.live()["streamsInFlight"], "1")
        self.assert_no_csp_violation()

    def test_a_new_sign_in_opens_one_stream(self):
        self.stub.SetBudget(B.SetBudgetRequest(scope=scope(self.s), settings=B.BudgetSettings(
            limit_tokens=100000)), metadata=self.md, timeout=10)
        self.sign_in_ok(self.keys["viewer"], "viewer")
        self.wait_stream_open()
        opens = int(self.live()["streamOpens"])
        self.sign_out()
        self.assertEqual(self.live()["stream"], "closed")
        self.wait_for(lambda d: self.live()["streamsInFlight"] == "0",
                      "the stream to end with the sign-out")
        self.assertEqual(self.text("live"), "")

        self.sign_in_ok(self.keys["operator"], "operator")
        self.wait_stream_open()
        self.assertEqual(self.live()["events"], "0", "events counted before this sign-in")
        # An event on the new stream, then the counts: a second stream opened by the sign-in
        # would have had that long to show.
        self.spend(10, self.s)
        self.wait_for(lambda d: int(self.live()["events"]) > 0, "the new stream's first event",
                      EVENT_WAIT_S)
        self.wait_for(lambda d: self.node_text(self.s, "used") == "10", "the spend",
                      EVENT_WAIT_S)
        self.assertEqual(int(self.live()["streamOpens"]), opens + 1)
        self.assertEqual(self.live()["streamsInFlight"], "1")

    def test_a_wrong_key_is_refused_with_the_servers_message(self):
        self.sign_in("cg_" + uuid.uuid4().hex)
        self.wait_for(lambda d: "UNAUTHENTICATED" in d.find_element(By.ID, "error").text,
                      "the sign-in error")
        self.assertIn("401", self.text("error"))
        self.assertFalse(self.d.find_element(By.ID, "main").is_displayed())
        self.assertIsNone(self.d.execute_script(
            "return sessionStorage.getItem('ctxguard.console.key')"))
        self.shot("refused")

    def test_an_operator_approves_in_the_page_and_a_viewer_cannot(self):
        self.stub.SetBudget(B.SetBudgetRequest(scope=scope(self.s), settings=B.BudgetSettings(
            limit_tokens=1000, mode=B.BUDGET_MODE_APPROVAL)), metadata=self.md, timeout=10)
        agent = cgtest.bearer(self.keys["agent"])

        def reserve():
            return self.stub.Reserve(B.ReserveRequest(scope=scope(self.s), tokens=1500,
                                                      delay_mode=B.DELAY_MODE_RETURN_ONLY),
                                     metadata=agent, timeout=10)

        first = reserve()
        self.assertEqual(first.decision, B.DECISION_REQUIRE_APPROVAL)
        aid = first.approval_id

        # A viewer sees the approval and is refused when approving it.
        self.sign_in_ok(self.keys["viewer"], "viewer")
        self.wait_for(lambda d: self.approval_row(aid) is not None, "the pending approval")
        row = self.approval_row(aid)
        self.assertIn(f"session {self.s}", row.text)
        self.assertIn("1,500", row.text)
        # The audit trail is not a viewer's: the Changes panel says so, and it is no error.
        self.wait_for(lambda d: "not readable with a viewer key" in self.text("audit-note"),
                      "the Changes panel's note for a viewer")
        self.assertFalse(self.d.find_element(By.ID, "error").is_displayed(), self.text("error"))
        self.assertEqual(self.d.find_elements(By.CSS_SELECTOR, "#audit tr"), [])
        row.find_element(By.CSS_SELECTOR, "input.granted").send_keys("600")
        row.find_element(By.CSS_SELECTOR, "button.approve").click()
        self.wait_for(lambda d: "PERMISSION_DENIED" in d.find_element(By.ID, "error").text,
                      "the viewer's refusal")
        self.assertIn("403", self.text("error"))
        self.assertIn("Could not approve", self.text("error"))
        self.assertIsNotNone(self.approval_row(aid), "still pending")
        self.shot("viewer-refused")
        self.sign_out()

        # An operator approves 600 tokens.
        self.sign_in_ok(self.keys["operator"], "operator")
        self.assertFalse(self.d.find_element(By.ID, "error").is_displayed(),
                         "the viewer's error outlived the sign-out")
        self.wait_for(lambda d: self.approval_row(aid) is not None, "the pending approval")
        row = self.approval_row(aid)
        row.find_element(By.CSS_SELECTOR, "input.granted").send_keys("600")
        self.shot("operator-before")
        row.find_element(By.CSS_SELECTOR, "button.approve").click()
        self.wait_for(lambda d: self.approval_row(aid) is None, "the approval to leave the queue")
        self.wait_for(lambda d: any(e.get_attribute("data-approval-id") == aid
                                    and "approved" in e.text and "600" in e.text
                                    for e in d.find_elements(By.CSS_SELECTOR,
                                                             "#approval-history tr")),
                      "the decision in the history")
        self.assertIn("approved: 600 tokens added", self.text("notice"))
        self.assertFalse(self.d.find_element(By.ID, "error").is_displayed(), self.text("error"))
        # The Changes panel shows the decision (by an operator key) and the budget set
        # before it (by the admin key), newest first.
        def changes(d):
            return [(r.find_element(By.CSS_SELECTOR, "td.kind").text,
                     r.find_element(By.CSS_SELECTOR, "td.scope").text,
                     r.find_element(By.CSS_SELECTOR, "td.by").text)
                    for r in d.find_elements(By.CSS_SELECTOR, "#audit tr")]
        self.wait_for(lambda d: any(k == "approval_approved" and aid in t
                                    for k, t, _ in changes(d)), "the decision in Changes")
        rows = changes(self.d)
        kinds = [k for k, _, _ in rows]
        self.assertLess(kinds.index("approval_approved"), kinds.index("budget_set"))
        decided = rows[kinds.index("approval_approved")]
        self.assertIn(f"session {self.s}", decided[1])
        self.assertTrue(decided[2].startswith("operator "), decided)
        self.shot("operator-approved")

        # The agent's Reserve now goes through.
        again = reserve()
        self.assertNotEqual(again.decision, B.DECISION_REQUIRE_APPROVAL)
        self.assertTrue(again.reservation.reservation_id)
        got = self.stub.GetApproval(B.GetApprovalRequest(approval_id=aid), metadata=self.md,
                                    timeout=10)
        self.assertEqual((got.approval.state, got.approval.granted_tokens),
                         (B.APPROVAL_STATE_APPROVED, 600))
        # ... and the tree shows the approved extra beside the limit.
        self.wait_for(lambda d: self.node_text(self.s, "limit") == "1,000 + 600 approved",
                      "the approved extra in the tree")

    def test_a_hostile_session_id_is_shown_as_text(self):
        evil = 's"><img/src=x/onerror=alert(1)>'
        self.stub.SetBudget(B.SetBudgetRequest(scope=scope(evil), settings=B.BudgetSettings(
            limit_tokens=100, mode=B.BUDGET_MODE_APPROVAL)), metadata=self.md, timeout=10)
        self.stub.SetBudget(B.SetBudgetRequest(scope=scope(evil, "<b>t</b>"),
                                               settings=B.BudgetSettings(limit_tokens=50)),
                            metadata=self.md, timeout=10)
        self.spend(7, evil, "<b>t</b>")
        r = self.stub.Reserve(B.ReserveRequest(scope=scope(evil), tokens=500,
                                               delay_mode=B.DELAY_MODE_RETURN_ONLY),
                              metadata=cgtest.bearer(self.keys["agent"]), timeout=10)
        self.assertEqual(r.decision, B.DECISION_REQUIRE_APPROVAL)
        self.sign_in_ok(self.keys["admin"], "admin")
        self.wait_for(lambda d: self.node_text(evil + "/<b>t</b>", "used") == "7",
                      "the hostile ids' node")
        self.wait_for(lambda d: self.approval_row(r.approval_id) is not None,
                      "the hostile scope's approval")
        self.wait_for(lambda d: evil in d.find_element(By.ID, "sessions").text,
                      "the hostile id in the list")
        self.node(evil).find_element(By.CSS_SELECTOR, ":scope > .row button.chart").click()
        self.wait_for(lambda d: d.find_element(By.ID, "history-scope").text == "session " + evil,
                      "the hostile id as the chart's scope")
        self.wait_for(lambda d: d.find_element(By.ID, "compression-scope").text
                      == "session " + evil, "the hostile id in the compression panel")
        page = self.d.find_element(By.TAG_NAME, "body").text
        self.assertIn(evil, page)
        self.assertIn("<b>t</b>", page)
        self.assertIn(evil, self.approval_row(r.approval_id).text)
        self.assertEqual(self.d.find_elements(By.CSS_SELECTOR, "img[src=x]"), [])
        self.assertEqual(self.d.find_elements(By.CSS_SELECTOR, "#main img"), [])
        self.assertEqual(self.d.find_elements(By.XPATH, "//b[text()='t']"), [])
        self.assert_no_alert()
        self.assert_no_csp_violation()
        self.shot("hostile")

    def test_the_answer_carries_the_csp_and_no_inline_code(self):
        with urllib.request.urlopen(self.url, timeout=10) as r:
            headers = r.headers
            html = r.read().decode()
        csp = headers.get("Content-Security-Policy", "")
        for part in ("default-src 'none'", "script-src 'self'", "style-src 'self'",
                     "connect-src 'self'", "frame-ancestors 'none'"):
            self.assertIn(part, csp)
        self.assertNotIn("unsafe-inline", csp)
        self.assertNotIn("unsafe-eval", csp)
        self.assertEqual(headers.get("X-Frame-Options"), "DENY")
        self.assertEqual(headers.get("Referrer-Policy"), "no-referrer")
        self.assertIsNone(headers.get("Set-Cookie"))
        # No inline script, handler or style in the page (the CSP would refuse them anyway).
        scripts = re.findall(r"<script\b[^>]*>(.*?)</script>", html, re.S | re.I)
        self.assertEqual(len(scripts), 2)
        self.assertEqual([s.strip() for s in scripts], ["", ""])
        self.assertNotRegex(html, r"(?i)\son[a-z]+\s*=")
        self.assertNotRegex(html, r"(?i)\sstyle\s*=")
        for path, kind in (("console.js", "text/javascript"), ("console.css", "text/css"),
                           ("vendor/uPlot.iife.min.js", "text/javascript"),
                           ("vendor/uPlot.min.css", "text/css")):
            with urllib.request.urlopen(self.url + path, timeout=10) as r:
                self.assertTrue(r.headers.get("Content-Type", "").startswith(kind), path)
                self.assertIn("script-src 'self'", r.headers.get("Content-Security-Policy", ""))
                self.assertGreater(len(r.read()), 1000, path)
