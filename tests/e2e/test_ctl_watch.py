"""ctxguardctl watch against a real server: the live view (redrawn in place on a
terminal) as budgets and usage move, the line-per-event output (--lines, and the default
when stdout is not a terminal), a clean exit 0 on SIGINT, and errors."""

import errno
import fcntl
import os
import re
import select
import signal
import struct
import subprocess
import termios
import time
import unittest
import uuid

import cgtest
from cgtest import budget_pb2, budget_pb2_grpc, common_pb2

B = budget_pb2
CLEAR = "\033[H\033[J"
SHOW_CURSOR = "\033[?25h"
WAIT = 20  # seconds: a deadline, never a sleep


def scope(session="", task="", agent=""):
    return common_pb2.Scope(session_id=session, task_id=task, agent_id=agent)


class Tenant:
    """A tenant with its own key and stub on a server."""

    def __init__(self, srv):
        t = srv.create_tenant()
        self.id = t.tenant_id
        self.key = srv.create_key(t.tenant_id).secret
        self.md = cgtest.bearer(self.key)
        self.stub = budget_pb2_grpc.BudgetServiceStub(srv.channel())

    def set(self, sc, limit):
        return self.stub.SetBudget(B.SetBudgetRequest(
            scope=sc, settings=B.BudgetSettings(limit_tokens=limit, mode=B.BUDGET_MODE_HARD)),
            metadata=self.md, timeout=10)

    def reserve(self, sc, tokens):
        return self.stub.Reserve(B.ReserveRequest(scope=sc, tokens=tokens), metadata=self.md,
                                 timeout=10)

    def commit(self, rid, tokens):
        return self.stub.Commit(B.CommitRequest(
            reservation_id=rid, usage=common_pb2.TokenUsage(input_tokens=tokens)),
            metadata=self.md, timeout=10)


class Watch:
    """`ctxguardctl watch ...` with stdout on a pseudo-terminal (tty=True) or a pipe; its
    output read with select() against deadlines."""

    def __init__(self, testcase, args, env, tty=True):
        self.tc = testcase
        argv = [cgtest.require_env("CG_CTL_BIN")] + list(args)
        if tty:
            master, slave = os.openpty()
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 60, 160, 0, 0))
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave,
                                         stderr=subprocess.PIPE, env=env)
            os.close(slave)
            self.fd = master
            testcase.addCleanup(os.close, master)
        else:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, env=env)
            self.fd = self.proc.stdout.fileno()
            testcase.addCleanup(self.proc.stdout.close)
        testcase.addCleanup(self._kill)
        self.raw = b""
        self.eof = False

    def _kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc.stderr.close()

    def _read(self, timeout):
        ready, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
        if not ready:
            return
        try:
            data = os.read(self.fd, 65536)
        except OSError as e:  # a pty's master reads EIO once the slave side is gone
            if e.errno != errno.EIO:
                raise
            data = b""
        if not data:
            self.eof = True
        self.raw += data

    @property
    def text(self):
        return self.raw.decode(errors="replace").replace("\r\n", "\n")

    def wait_for(self, pred, what, timeout=WAIT):
        deadline = time.monotonic() + timeout
        while True:
            text = self.text
            if pred(text):
                return text
            left = deadline - time.monotonic()
            if self.eof or left <= 0:
                self.tc.fail(f"watch: no {what} within {timeout}s (eof={self.eof})\n"
                             f"output tail: {text[-3000:]!r}")
            self._read(min(left, 1.0))

    def interrupt(self):
        """SIGINT, then the rest of the output; returns (exit code, stderr)."""
        self.proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + WAIT
        while not self.eof and time.monotonic() < deadline:
            self._read(deadline - time.monotonic())
        return self.proc.wait(WAIT), self.proc.stderr.read().decode(errors="replace")


def frames(text):
    """The screens drawn so far (the text after each clear-screen/home)."""
    return text.split(CLEAR)[1:]


class CtlWatch(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls)

    def setUp(self):
        self.t = Tenant(self.srv)
        self.s = "s-" + uuid.uuid4().hex[:8]
        self.t.set(scope(), 100000)
        self.t.set(scope(self.s), 10000)

    def env(self, key=None):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CTXGUARD_")}
        env["CTXGUARD_TARGET"] = self.srv.target
        env["CTXGUARD_KEY"] = key or self.t.key
        return env

    def watch(self, *args, tty=True, key=None):
        return Watch(self, ("watch",) + args, self.env(key), tty=tty)

    def test_live_view_redraws_bars_and_notable_events(self):
        w = self.watch(self.s, "--live")
        # The snapshot: the session's row, before anything moves.
        w.wait_for(lambda t: any(re.search(rf"^session {self.s}  \[\.{{12}}\]  0/10000 \(0%\)",
                                           f, re.M) for f in frames(t)), "snapshot frame")

        self.t.set(scope(self.s, "t1"), 1000)
        w.wait_for(lambda t: any(re.search(r"^  task t1  \[\.{12}\]  0/1000 \(0%\)  reserved 0$",
                                           f, re.M) for f in frames(t)), "task row")

        rid = self.t.reserve(scope(self.s, "t1"), 900).reservation.reservation_id
        self.t.commit(rid, 850)  # 85 % of the task: over the 0.8 warning

        task_row = re.compile(r"^  task t1  \[#{10}\.\.\]  850/1000 \(85%\)  reserved 0"
                              r"  delay \d+ms$", re.M)
        warning = re.compile(rf"^  \S+Z  warning  task {self.s}/t1  at 0\.80", re.M)
        threshold = re.compile(rf"^  \S+Z  threshold crossed  task {self.s}/t1  at 0\.80", re.M)

        def settled(text):
            return any(task_row.search(f) and warning.search(f) and threshold.search(f)
                       for f in frames(text))

        text = w.wait_for(settled, "frame with the task at 85 % and the warning")
        frame = next(f for f in frames(text) if settled(CLEAR + f))
        header = frame.splitlines()[0]
        self.assertIn(self.srv.target, header)
        self.assertRegex(header, rf"scope {self.s}  at \d{{4}}-\d\d-\d\dT\S+Z  events \d+$")
        # Tree order and indentation: the session above its task; the footer at most 5.
        lines = frame.splitlines()
        self.assertLess(lines.index(next(x for x in lines if x.startswith("session "))),
                        lines.index(next(x for x in lines if x.startswith("  task t1"))))
        notes = lines[lines.index("recent:") + 1:]
        self.assertLessEqual(len([x for x in notes if x.strip()]), 5)
        # The session's own update may trail (USAGE_CHANGED is throttled per scope).
        w.wait_for(lambda t: re.search(rf"^session {self.s}  \[#\.{{11}}\]  850/10000 \(8%\)"
                                       r"  reserved 0$", frames(t)[-1], re.M), "session at 8 %")

        code, err = w.interrupt()
        self.assertEqual(code, 0, f"stderr: {err}")
        self.assertEqual(err, "")
        self.assertTrue(w.text.endswith(SHOW_CURSOR),
                        f"the terminal is restored last: {w.text[-200:]!r}")

    def test_lines_on_a_terminal_with_the_flag(self):
        w = self.watch(self.s, "--lines", "--descendants")
        w.wait_for(lambda t: "SNAPSHOT" in t, "SNAPSHOT line")
        self.t.set(scope(self.s, "t2"), 500)
        text = w.wait_for(lambda t: re.search(rf"^BUDGET_CHANGED +task +{self.s}/t2/- ", t, re.M),
                          "BUDGET_CHANGED line")
        self.assertNotIn("\033", text)
        code, err = w.interrupt()
        self.assertEqual(code, 0, f"stderr: {err}")
        for line in w.text.splitlines():
            self.assertRegex(line, r"^[A-Z_]+ +(tenant|session|task|agent) +\S+/\S+/\S+")

    def test_lines_by_default_when_stdout_is_not_a_terminal(self):
        w = self.watch(self.s, tty=False)
        w.wait_for(lambda t: re.search(rf"^SNAPSHOT +session +{self.s}/-/- ", t, re.M),
                   "SNAPSHOT line")
        self.t.set(scope(self.s), 9000)
        text = w.wait_for(lambda t: "BUDGET_CHANGED" in t, "BUDGET_CHANGED line")
        self.assertNotIn("\033", text)
        code, err = w.interrupt()
        self.assertEqual(code, 0, f"stderr: {err}")

    def test_stream_error_exits_1_with_the_terminal_restored(self):
        w = self.watch(self.s, "--live", key="cgk_not_a_real_key")
        w.wait_for(lambda t: w.eof, "the end of the output")
        self.assertEqual(w.proc.wait(WAIT), 1)
        err = w.proc.stderr.read().decode()
        self.assertRegex(err, r"^ctxguardctl: UNAUTHENTICATED: ")
        self.assertTrue(w.text.endswith(SHOW_CURSOR), repr(w.text[-200:]))

    def test_usage_errors(self):
        for args in (("watch", "--live", "--lines"), ("--json", "watch", "--live")):
            proc = subprocess.run([cgtest.require_env("CG_CTL_BIN")] + list(args),
                                  env=self.env(), capture_output=True, text=True, timeout=30)
            self.assertEqual(proc.returncode, 2, proc.stderr)


if __name__ == "__main__":
    unittest.main()
