"""Support for the Python end-to-end tests: a real ctxguard server driven by grpcio.

ctest runs every tests/e2e/test_*.py as `/usr/bin/python3 -m unittest -v test_x` from
tests/e2e with CG_SERVER_BIN, CG_CTL_BIN, CG_SOURCE_DIR and CG_BUILD_DIR set; `make test`
adds CG_TEST_PG_DSN and CG_TEST_REDIS_URL (throwaway PostgreSQL and Redis shared by all
tests). Missing variables make the tests fail, never skip.

What is here:
- stubs generated from proto/ at import time into a temporary directory (ctxguard.v1.*
  with protoc + grpc_tools for the service stubs); the grpc.health.v1 and
  grpc.reflection.* messages are built from a descriptor set in a private pool, so that
  nothing named `grpc` is ever put on sys.path and `import grpc` stays the real grpcio;
- Server: one ctxguard process on 127.0.0.1:0 with its own PostgreSQL schema, its
  stdout/stderr drained by threads (every line kept), SERVING awaited with Health/Watch;
- TcpProxy: a cuttable TCP proxy (for "PostgreSQL unreachable" without touching the
  shared PostgreSQL);
- helpers for psql, certificates (openssl CLI) and status assertions.
"""

import asyncio
import atexit
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse
import uuid

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

# ---------------------------------------------------------------- environment ------

_HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("CG_SOURCE_DIR") or os.path.normpath(os.path.join(_HERE, "..", ".."))
PROTO_DIR = os.path.join(SOURCE_DIR, "proto")
GRPC_PROTO_DIR = "/usr/share/grpc-proto"
PYTHON = "/usr/bin/python3"

ADMIN_KEY = "e2e-admin-" + uuid.uuid4().hex  # >= 16 characters


def require_env(name):
    """The value of a variable the tests cannot run without; fails (never skips)."""
    value = os.environ.get(name, "")
    if not value:
        raise AssertionError(
            f"{name} is not set: run the end-to-end tests through ctest / `make test` "
            f"(which exports CG_SERVER_BIN, CG_CTL_BIN, CG_TEST_PG_DSN, CG_TEST_REDIS_URL), "
            f"or export it by hand")
    return value


def server_bin():
    path = require_env("CG_SERVER_BIN")
    if not os.access(path, os.X_OK):
        raise AssertionError(f"CG_SERVER_BIN={path} is not an executable: build it first")
    return path


def pg_dsn():
    return require_env("CG_TEST_PG_DSN")


def redis_url():
    return require_env("CG_TEST_REDIS_URL")


# ---------------------------------------------------------------- stubs ------------

_GEN_DIR = tempfile.mkdtemp(prefix="cg_e2e_stubs_")
atexit.register(shutil.rmtree, _GEN_DIR, True)


def _run_checked(argv, what):
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{what} failed ({r.returncode}): {' '.join(argv)}\n{r.stderr}")
    return r.stdout


def _generate_stubs():
    protos = sorted(
        os.path.join("ctxguard", "v1", f)
        for f in os.listdir(os.path.join(PROTO_DIR, "ctxguard", "v1")) if f.endswith(".proto"))
    if not protos:
        raise RuntimeError(f"no .proto files under {PROTO_DIR}/ctxguard/v1")
    protoc = shutil.which("protoc") or "/usr/bin/protoc"
    # Messages: the system protoc (3.21), matching the installed protobuf runtime.
    _run_checked([protoc, "-I", PROTO_DIR, "-I", GRPC_PROTO_DIR, f"--python_out={_GEN_DIR}"]
                 + protos, "protoc --python_out")
    # Service stubs: Debian's grpc_tools bundles an old protoc; used for grpc_python_out only.
    _run_checked([PYTHON, "-m", "grpc_tools.protoc", "-I", PROTO_DIR, "-I", GRPC_PROTO_DIR,
                  f"--grpc_python_out={_GEN_DIR}"] + protos, "grpc_tools.protoc --grpc_python_out")
    # grpc.health.v1 and grpc.reflection.*: a descriptor set, loaded into a private pool.
    desc = os.path.join(_GEN_DIR, "grpc_std.desc")
    _run_checked([protoc, "-I", GRPC_PROTO_DIR, "--include_imports", f"--descriptor_set_out={desc}",
                  "grpc/health/v1/health.proto", "grpc/reflection/v1/reflection.proto",
                  "grpc/reflection/v1alpha/reflection.proto"], "protoc --descriptor_set_out")
    with open(desc, "rb") as f:
        return descriptor_pb2.FileDescriptorSet.FromString(f.read())


_STD_SET = _generate_stubs()
sys.path.insert(0, _GEN_DIR)

# Re-exported for the tests: `from cgtest import admin_pb2, budget_pb2, ...`.
from ctxguard.v1 import admin_pb2, admin_pb2_grpc  # noqa: E402,F401
from ctxguard.v1 import budget_pb2, budget_pb2_grpc  # noqa: E402,F401
from ctxguard.v1 import common_pb2  # noqa: E402,F401
from ctxguard.v1 import context_pb2, context_pb2_grpc  # noqa: E402,F401

if not os.path.dirname(os.path.abspath(grpc.__file__)).startswith("/usr/lib/python3"):
    raise RuntimeError(f"`import grpc` does not give Debian's grpcio: {grpc.__file__}")


class DynamicPool:
    """A descriptor pool with message classes built on demand (no generated code)."""

    def __init__(self, file_protos=()):
        self.pool = descriptor_pool.DescriptorPool()
        self._factory = None
        for fp in file_protos:
            self.pool.Add(fp)

    def message(self, full_name):
        desc = self.pool.FindMessageTypeByName(full_name)
        get = getattr(message_factory, "GetMessageClass", None)
        if get is not None:
            return get(desc)
        if self._factory is None:
            self._factory = message_factory.MessageFactory(self.pool)
        return self._factory.GetPrototype(desc)


_STD = DynamicPool(_STD_SET.file)


class health:  # noqa: N801 - a namespace standing in for health_pb2
    HealthCheckRequest = _STD.message("grpc.health.v1.HealthCheckRequest")
    HealthCheckResponse = _STD.message("grpc.health.v1.HealthCheckResponse")
    SERVING = HealthCheckResponse.SERVING
    NOT_SERVING = HealthCheckResponse.NOT_SERVING
    SERVICE_UNKNOWN = HealthCheckResponse.SERVICE_UNKNOWN
    UNKNOWN = HealthCheckResponse.UNKNOWN

    @staticmethod
    def name(status):
        return health.HealthCheckResponse.ServingStatus.Name(status)


class reflection:  # noqa: N801
    class v1:  # noqa: N801
        SERVICE = "grpc.reflection.v1.ServerReflection"
        Request = _STD.message("grpc.reflection.v1.ServerReflectionRequest")
        Response = _STD.message("grpc.reflection.v1.ServerReflectionResponse")

    class v1alpha:  # noqa: N801
        SERVICE = "grpc.reflection.v1alpha.ServerReflection"
        Request = _STD.message("grpc.reflection.v1alpha.ServerReflectionRequest")
        Response = _STD.message("grpc.reflection.v1alpha.ServerReflectionResponse")


def health_check(channel, service="", timeout=10, metadata=None):
    call = channel.unary_unary("/grpc.health.v1.Health/Check",
                               request_serializer=health.HealthCheckRequest.SerializeToString,
                               response_deserializer=health.HealthCheckResponse.FromString)
    return call(health.HealthCheckRequest(service=service), timeout=timeout, metadata=metadata)


def health_watch(channel, service="", timeout=None):
    call = channel.unary_stream("/grpc.health.v1.Health/Watch",
                                request_serializer=health.HealthCheckRequest.SerializeToString,
                                response_deserializer=health.HealthCheckResponse.FromString)
    return call(health.HealthCheckRequest(service=service), timeout=timeout)


def raw_unary(channel, method):
    """A unary call that sends and receives raw bytes."""
    return channel.unary_unary(method)


def reflection_call(channel, version, requests, timeout=10):
    """Sends the reflection requests on one ServerReflectionInfo stream; returns answers."""
    ns = getattr(reflection, version)
    call = channel.stream_stream(f"/{ns.SERVICE}/ServerReflectionInfo",
                                 request_serializer=ns.Request.SerializeToString,
                                 response_deserializer=ns.Response.FromString)
    return list(call(iter(requests), timeout=timeout))


class WatchRecorder:
    """Consumes a Health/Watch stream on a thread; the test waits for what it expects."""

    def __init__(self, channel, service="", timeout=120):
        self.call = health_watch(channel, service, timeout=timeout)
        self.seen = []
        self.end = None  # None while open; then ("ok", None) or ("error", RpcError)
        self._q = queue.Queue()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        try:
            for r in self.call:
                self._q.put(("status", r.status))
            self._q.put(("end", None))
        except grpc.RpcError as e:
            self._q.put(("end", e))

    def _next(self, deadline):
        left = deadline - time.monotonic()
        if left <= 0:
            raise queue.Empty
        return self._q.get(timeout=left)

    def expect(self, status, timeout):
        """Waits until the stream delivers `status`; fails on timeout or end of stream."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                kind, value = self._next(deadline)
            except queue.Empty:
                raise AssertionError(
                    f"Health/Watch did not deliver {health.name(status)} within {timeout} s; "
                    f"seen so far: {[health.name(s) for s in self.seen]}") from None
            if kind == "end":
                self.end = value
                raise AssertionError(
                    f"Health/Watch ended ({_describe(value)}) before {health.name(status)}; "
                    f"seen: {[health.name(s) for s in self.seen]}")
            self.seen.append(value)
            if value == status:
                return

    def expect_end(self, timeout):
        """Waits until the stream ends; returns None (clean end) or the RpcError."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                kind, value = self._next(deadline)
            except queue.Empty:
                raise AssertionError(f"Health/Watch still open after {timeout} s; seen: "
                                     f"{[health.name(s) for s in self.seen]}") from None
            if kind == "end":
                self.end = value
                return value
            self.seen.append(value)

    def cancel(self):
        self.call.cancel()


def _describe(err):
    if err is None:
        return "status OK"
    return f"{err.code().name}: {err.details()}"


def wait_on(condition, predicate, timeout, describe):
    """With condition (a threading.Condition) held, waits until predicate() is true, woken
    by its notifications; AssertionError with describe() after timeout seconds."""
    deadline = time.monotonic() + timeout
    with condition:
        while not predicate():
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(describe())
            condition.wait(left)


def wait_until(cond, timeout, what):
    """Polls cond() every 20 ms until it is true; AssertionError naming `what` after
    timeout seconds."""
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.02)


# ---------------------------------------------------------------- own services ----

def services_script():
    return os.path.join(require_env("CG_SOURCE_DIR"), "scripts", "services.sh")


class OwnServices:
    """PostgreSQL and Redis of one test class (scripts/services.sh under a directory of
    their own), so that the faults a test injects do not disturb the tests running beside
    it. fast: fsync, synchronous_commit and full_page_writes off (tests that claim no
    durability); otherwise a durable cluster, checked."""

    def __init__(self, fast=True, prefix="services-"):
        base = os.environ.get("CG_TEST_RUN_DIR") or None
        self.dir = tempfile.mkdtemp(prefix=prefix, dir=base)
        self.sh("start", *(["--fast"] if fast else []))
        env = {}
        with open(os.path.join(self.dir, "env")) as f:
            for line in f:
                line = line.strip()
                if line.startswith("export ") and "=" in line:
                    k, v = line[len("export "):].split("=", 1)
                    env[k] = v.strip("'\"")
        self.pg = env["CTXGUARD_PG_DSN"]
        self.redis = env["CTXGUARD_REDIS_URL"]
        if not fast:
            for setting in ("fsync", "synchronous_commit"):
                value = psql(f"SHOW {setting}", self.pg).strip()
                if value != "on":
                    raise AssertionError(f"{setting} is {value} on {self.dir}: not durable")

    def sh(self, command, *options):
        """services.sh COMMAND [OPTIONS] DIR (pg-stop [--immediate], pg-freeze, ...)."""
        cmd = [services_script(), command] + list(options) + [self.dir]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=120)
        if r.returncode != 0:
            raise AssertionError(f"services.sh {command} failed: {r.stderr}")

    def redis_cli(self, *args):
        r = subprocess.run(["redis-cli", "-u", self.redis] + list(args), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=10)
        if r.returncode != 0:
            raise AssertionError(f"redis-cli {args} failed: {r.stderr}")
        return r.stdout.strip()

    def close(self):
        # When destroy fails the directory stays: it names what still runs, and its logs.
        self.sh("destroy")
        shutil.rmtree(self.dir, ignore_errors=True)


# ---------------------------------------------------------------- PostgreSQL -------

def psql(sql, dsn=None):
    """Runs SQL with psql; returns stdout (unaligned, tuples only)."""
    argv = ["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", dsn or pg_dsn(),
            "-c", sql]
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=60)
    if r.returncode != 0:
        raise AssertionError(f"psql failed ({r.returncode}) for {sql!r}: {r.stderr.strip()}")
    return r.stdout


def new_schema():
    name = "cg_e2e_" + uuid.uuid4().hex[:12]
    psql(f"CREATE SCHEMA {name}")
    return name


def drop_schema(name):
    psql(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def dsn_with_schema(dsn, schema):
    """The DSN with search_path set to `schema` (URI or key=value form)."""
    if "://" in dsn:
        opt = "options=" + urllib.parse.quote(f"-csearch_path={schema}", safe="-")
        return dsn + ("&" if "?" in dsn else "?") + opt
    return f"{dsn} options='-csearch_path={schema}'"


def dsn_host_port(dsn):
    u = urllib.parse.urlsplit(dsn)
    if not u.scheme:
        raise AssertionError(f"this test needs a URI DSN, got {dsn!r}")
    return u.hostname or "127.0.0.1", u.port or 5432


def dsn_with_host_port(dsn, host, port):
    u = urllib.parse.urlsplit(dsn)
    userinfo = u.netloc.rpartition("@")[0]
    netloc = (userinfo + "@" if userinfo else "") + f"{host}:{port}"
    return urllib.parse.urlunsplit((u.scheme, netloc, u.path, u.query, u.fragment))


# ---------------------------------------------------------------- process output ---

class LineLog:
    """Every line of a pipe, read by a thread so that the pipe never fills up."""

    def __init__(self, pipe, name):
        self.name = name
        self._lines = []
        self._raw = []
        self._eof = False
        self._cv = threading.Condition()
        self._t = threading.Thread(target=self._run, args=(pipe,), daemon=True)
        self._t.start()

    def _run(self, pipe):
        for raw in iter(pipe.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with self._cv:
                self._raw.append(raw.rstrip(b"\n"))
                self._lines.append(line)
                self._cv.notify_all()
        pipe.close()
        with self._cv:
            self._eof = True
            self._cv.notify_all()

    def lines(self):
        with self._cv:
            return list(self._lines)

    def raw_lines(self):
        """The lines as bytes, exactly as written."""
        with self._cv:
            return list(self._raw)

    def text(self):
        return "\n".join(self.lines())

    def wait_for(self, match, timeout, start=0):
        """The first line (from index `start`) for which match(line) is true (match may be
        a regex string), or None when the pipe closes or the time is up."""
        if isinstance(match, str):
            rx = re.compile(match)
            match = lambda line: rx.search(line) is not None  # noqa: E731
        deadline = time.monotonic() + timeout
        i = start
        with self._cv:
            while True:
                while i < len(self._lines):
                    if match(self._lines[i]):
                        return self._lines[i]
                    i += 1
                left = deadline - time.monotonic()
                if self._eof or left <= 0:
                    return None
                self._cv.wait(left)

    def wait_eof(self, timeout):
        deadline = time.monotonic() + timeout
        with self._cv:
            while not self._eof:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
            return True


def tail(text, n=40):
    lines = text.splitlines()
    return "\n".join(lines[-n:])


# ---------------------------------------------------------------- the server -------

def _listening_port(line):
    line = line.strip()
    if line.startswith("{"):
        try:
            return int(json.loads(line)["port"])
        except (ValueError, KeyError):
            return None
    m = re.search(r"\bport=(\d+)", line)
    return int(m.group(1)) if m else None


def _is_listening(line):
    return "msg=listening" in line or '"msg":"listening"' in line


def clean_env(extra=None):
    """The environment without CTXGUARD_* (from the caller's shell), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXGUARD_")}
    env.update(extra or {})
    return env


class Server:
    """One ctxguard server on 127.0.0.1:0 with its own PostgreSQL schema.

    env: CTXGUARD_* overrides (None as a value removes the variable); args: extra
    command-line arguments. The admin key is ADMIN_KEY unless env says otherwise.
    schema: another server's schema to share (default: a new one, dropped at close).
    tls: None or a Certs (then channel() speaks TLS, with the client cert when
    client_cert=True)."""

    def __init__(self, env=None, args=(), pg=None, tls=None, client_cert=False,
                 log_level="debug", schema=None):
        self.bin = server_bin()
        # A schema given by the caller is shared (another server's): not dropped here.
        self.own_schema = schema is None
        self.schema = schema or new_schema()
        self.dsn = dsn_with_schema(pg or pg_dsn(), self.schema)
        base = {
            "CTXGUARD_LISTEN": "127.0.0.1:0",
            "CTXGUARD_PG_DSN": self.dsn,
            "CTXGUARD_REDIS_URL": redis_url(),
            "CTXGUARD_ADMIN_KEY": ADMIN_KEY,
            "CTXGUARD_LOG_LEVEL": log_level,
            "CTXGUARD_SHUTDOWN_GRACE_MS": "5000",
        }
        for k, v in (env or {}).items():
            if v is None:
                base.pop(k, None)
            else:
                base[k] = str(v)
        self.env = base
        self.admin_key = base.get("CTXGUARD_ADMIN_KEY", "")
        self.args = list(args)
        self.tls = tls
        self.client_cert = client_cert
        self.proc = None
        self.port = None
        self.err = None
        self.out = None
        self._channels = []

    # -- lifecycle

    def start(self, wait_serving=True, timeout=30):
        self.start_async()
        return self.finish_start(wait_serving, timeout)

    def start_async(self):
        """Starts the process without waiting for it (see finish_start)."""
        self.proc = subprocess.Popen([self.bin] + self.args, env=clean_env(self.env),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self.err = LineLog(self.proc.stderr, "stderr")
        self.out = LineLog(self.proc.stdout, "stdout")
        return self

    def finish_start(self, wait_serving=True, timeout=30):
        """Waits for the port, then (by default) for SERVING."""
        line = self.err.wait_for(_is_listening, timeout)
        if line is None or _listening_port(line) is None:
            self.kill()
            raise AssertionError(f"the server did not report its port within {timeout} s "
                                 f"(exit {self.proc.returncode}); stderr:\n{tail(self.err.text())}")
        self.port = _listening_port(line)
        if wait_serving:
            self.wait_serving(timeout)
        return self

    def wait_serving(self, timeout=30):
        """Waits (Health/Watch, event-driven) until the server reports SERVING."""
        ch = self.channel()
        try:
            for r in health_watch(ch, timeout=timeout):
                if r.status == health.SERVING:
                    return
        except grpc.RpcError as e:
            raise AssertionError(f"waiting for SERVING: {_describe(e)}; stderr:\n"
                                 f"{tail(self.err.text())}") from None
        raise AssertionError(f"Health/Watch ended before SERVING; stderr:\n{tail(self.err.text())}")

    def signal(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)

    def wait_exit(self, timeout):
        """The exit status; fails when the server is still running after `timeout` s."""
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the server is still running {timeout} s later; stderr:\n"
                                 f"{tail(self.err.text())}") from None
        self.err.wait_eof(5)
        self.out.wait_eof(5)
        return rc

    def stop(self, timeout=20, close_channels=True):
        """SIGTERM and wait; returns the exit status. The client channels are closed first
        (tests about shutdown with open connections use signal() and wait_exit())."""
        if close_channels:
            self.close_channels()
        self.signal(signal.SIGTERM)
        return self.wait_exit(timeout)

    def close_channels(self):
        for ch in self._channels:
            ch.close()
        self._channels = []

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self):
        """Stops the server (SIGTERM, so that a sanitizer build reports leaks; SIGKILL if it
        hangs), drops its schema, and fails on any sanitizer report in its stderr."""
        self.close_channels()
        if self.running():
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        self.kill()
        if self.err is not None:
            self.err.wait_eof(5)
            self.out.wait_eof(5)
        if self.schema and self.own_schema:
            drop_schema(self.schema)
        self.schema = None
        if self.err is not None:
            report = sanitizer_report(self.err.text())
            if report:
                raise AssertionError(f"the server's sanitizers reported:\n{report}")

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    # -- clients

    @property
    def target(self):
        return f"127.0.0.1:{self.port}"

    def channel(self, options=None):
        """A new channel (closed by close()); TLS when the server has TLS."""
        opts = list(options or [])
        if self.tls is None:
            ch = grpc.insecure_channel(self.target, options=opts)
        else:
            creds = self.tls.client_credentials(self.client_cert)
            ch = grpc.secure_channel(self.target, creds, options=opts)
        self._channels.append(ch)
        return ch

    def admin(self, channel=None):
        return admin_pb2_grpc.AdminServiceStub(channel or self.channel())

    def admin_md(self):
        return bearer(self.admin_key)

    def create_tenant(self, name=None, time_zone=""):
        name = name or "tenant-" + uuid.uuid4().hex[:8]
        r = self.admin().CreateTenant(admin_pb2.CreateTenantRequest(name=name, time_zone=time_zone),
                                      metadata=self.admin_md(), timeout=10)
        return r.tenant

    def create_key(self, tenant_id, name="e2e", role="admin", scope=None, ttl_ms=0):
        """A key of tenant_id; a tenant admin unless role ("agent", "viewer", "operator")
        says otherwise. scope: (session_id,) or (session_id, task_id) to bind it."""
        req = admin_pb2.CreateApiKeyRequest(
            tenant_id=tenant_id, name=name, ttl_ms=ttl_ms,
            role=admin_pb2.ApiKeyRole.Value("API_KEY_ROLE_" + role.upper()))
        if scope:
            req.scope.session_id = scope[0]
            if len(scope) > 1:
                req.scope.task_id = scope[1]
        return self.admin().CreateApiKey(req, metadata=self.admin_md(), timeout=10)

    def log_text(self):
        return self.err.text() if self.err else ""

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()


_SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                    "WARNING: ThreadSanitizer", "ERROR: UndefinedBehaviorSanitizer")


def sanitizer_report(text):
    """The part of a process's stderr from the first sanitizer report on, or ''."""
    idx = [text.find(m) for m in _SANITIZER_MARKS if m in text]
    if not idx:
        return ""
    start = text.rfind("\n", 0, min(idx)) + 1
    return text[start:start + 6000]


def bearer(key):
    return (("authorization", f"Bearer {key}"),)


def start_server(testcase, **kw):
    """Starts a server that the test case closes at its cleanup."""
    srv = Server(**kw)
    testcase.addCleanup(srv.close)
    srv.start()
    return srv


def start_class_server(cls, **kw):
    """Starts a server for a whole TestCase class (closed at class cleanup)."""
    srv = Server(**kw)
    cls.addClassCleanup(srv.close)
    srv.start()
    return srv


# ---------------------------------------------------------------- assertions -------

def rpc_error(fn, *args, **kw):
    """Calls fn; returns the grpc.RpcError it raised, fails if it succeeded."""
    try:
        result = fn(*args, **kw)
    except grpc.RpcError as e:
        return e
    raise AssertionError(f"expected an RPC error, got success: {result!r}")


class TestCase(unittest.TestCase):
    maxDiff = None

    def assertRpcError(self, code, fn, *args, contains=(), **kw):
        """fn(*args, **kw) must fail with `code` and a message containing every string of
        `contains` (case-insensitive). Returns the error."""
        err = rpc_error(fn, *args, **kw)
        self.assertEqual(err.code(), code,
                         f"expected {code.name}, got {err.code().name}: {err.details()!r}")
        details = err.details() or ""
        if isinstance(contains, str):
            contains = (contains,)
        for s in contains:
            self.assertIn(s.lower(), details.lower(),
                          f"status message {details!r} should name {s!r}")
        return err


# ---------------------------------------------------------------- TCP proxy --------

class TcpProxy:
    """A TCP proxy on 127.0.0.1 in front of (host, port), run by an asyncio loop on a
    thread. cut() closes the listener and every connection (the target looks
    unreachable); restore() listens again on the same port."""

    def __init__(self, host, port):
        self.target = (host, port)
        self.port = 0
        self._server = None
        self._conns = set()
        self.loop = asyncio.new_event_loop()
        self._t = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._t.start()
        self.restore()

    def _run(self, coro, timeout=10):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _pump(self, reader, writer):
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            writer.transport.abort()

    async def _handle(self, reader, writer):
        try:
            ureader, uwriter = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        pair = (writer, uwriter)
        self._conns.add(pair)
        try:
            await asyncio.gather(self._pump(reader, uwriter), self._pump(ureader, writer))
        finally:
            self._conns.discard(pair)

    async def _listen(self):
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port,
                                                  reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _cut(self):
        if self._server is not None:
            self._server.close()
            self._server = None
        for a, b in list(self._conns):
            a.transport.abort()
            b.transport.abort()
        self._conns.clear()

    def cut(self):
        self._run(self._cut())

    def restore(self):
        self._run(self._listen())

    def close(self):
        try:
            self.cut()
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._t.join(10)


# ---------------------------------------------------------------- certificates -----

class Certs:
    """A CA, a server certificate (127.0.0.1, localhost) and a client certificate, all
    made with the openssl CLI in `dir`; plus a client certificate from another CA."""

    def __init__(self, dir):
        openssl = shutil.which("openssl")
        if openssl is None:
            raise AssertionError("the openssl CLI is needed for the TLS tests: "
                                 "apt-get install openssl")
        self.dir = dir

        def run(*argv):
            _run_checked([openssl] + list(argv), "openssl " + argv[0])

        def p(name):
            return os.path.join(dir, name)

        # EC P-256 keys: quick to make, and supported by every TLS stack gRPC uses.
        newkey = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]
        for ca in ("ca", "otherca"):
            run("req", "-x509", *newkey, "-nodes", "-days", "2",
                "-subj", f"/CN=ctxguard e2e {ca}", "-keyout", p(f"{ca}.key"),
                "-out", p(f"{ca}.pem"))
        with open(p("server.ext"), "w") as f:
            f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                    "extendedKeyUsage=serverAuth\n")
        with open(p("client.ext"), "w") as f:
            f.write("extendedKeyUsage=clientAuth\n")
        for name, ca, ext in (("server", "ca", "server.ext"), ("client", "ca", "client.ext"),
                              ("rogue", "otherca", "client.ext")):
            run("req", *newkey, "-nodes", "-subj", f"/CN=ctxguard e2e {name}",
                "-keyout", p(f"{name}.key"), "-out", p(f"{name}.csr"))
            run("x509", "-req", "-in", p(f"{name}.csr"), "-CA", p(f"{ca}.pem"),
                "-CAkey", p(f"{ca}.key"), "-CAcreateserial", "-days", "2",
                "-extfile", p(ext), "-out", p(f"{name}.pem"))
        self.ca_pem = p("ca.pem")
        self.server_cert = p("server.pem")
        self.server_key = p("server.key")

    def read(self, name):
        with open(os.path.join(self.dir, name), "rb") as f:
            return f.read()

    def client_credentials(self, client_cert=False, which="client"):
        if client_cert:
            return grpc.ssl_channel_credentials(root_certificates=self.read("ca.pem"),
                                                private_key=self.read(f"{which}.key"),
                                                certificate_chain=self.read(f"{which}.pem"))
        return grpc.ssl_channel_credentials(root_certificates=self.read("ca.pem"))


# ---------------------------------------------------------------- descriptors ------

def service_methods(module, service_name):
    """[(method name, client_streaming, server_streaming, input type full name)] of a
    service, from the generated module's file descriptor (not a hand list)."""
    fp = descriptor_pb2.FileDescriptorProto()
    module.DESCRIPTOR.CopyToProto(fp)
    for svc in fp.service:
        if svc.name == service_name:
            return [(m.name, m.client_streaming, m.server_streaming, m.input_type.lstrip("."))
                    for m in svc.method]
    raise AssertionError(f"{module.__name__} has no service {service_name}")


def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
