"""A stateful session's end of life (issue 16, item 5): ContextService.DeleteSession (one
transaction, operators only, audited, NOT_FOUND afterwards), `ctxguardctl session delete`,
the per-session artifact cap (oldest first past session_artifacts_max, down to
session_artifacts_keep) and the tenant's history_retention_days applied by the sweeper."""

import json
import os
import subprocess
import uuid

import grpc

import cgtest
from cgtest import admin_pb2 as A
from cgtest import common_pb2, context_pb2 as C, context_pb2_grpc


def chat_with_results(n_results, marker):
    """A session's conversation with n_results tool results of 12,000 characters each (over
    the offload threshold), each naming its number."""
    msgs = [{"role": "system", "content": "You are a build assistant."}]
    for i in range(n_results):
        msgs.append({"role": "user", "content": f"{marker}: read log {i}"})
        msgs.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function",
             "function": {"name": "read_file", "arguments": json.dumps({"path": f"/l/{i}"})}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}",
                     "content": f"log {i} " + "line of output\n" * 860})
        msgs.append({"role": "assistant", "content": f"log {i} read"})
    return common_pb2.Conversation(openai_json=json.dumps({"messages": msgs}))


class Sessions(cgtest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = cgtest.start_class_server(cls, env={
            "CTXGUARD_SESSION_ARTIFACTS_MAX": "3",
            "CTXGUARD_SESSION_ARTIFACTS_KEEP": "2",
            "CTXGUARD_SWEEP_INTERVAL_MS": "200",
            "CTXGUARD_RETENTION_INTERVAL_MS": "200",
        })
        cls.stub = context_pb2_grpc.ContextServiceStub(cls.srv.channel())

    def setUp(self):
        self.tid = self.srv.create_tenant().tenant_id
        self.md = cgtest.bearer(self.srv.create_key(self.tid, role="agent").secret)
        self.op_md = cgtest.bearer(self.srv.create_key(self.tid, role="operator").secret)

    def compress(self, sid, conv, force=True):
        return self.stub.Compress(C.CompressRequest(
            conversation=conv, model="gpt-4o", session_id=sid, force=force,
            context_window_tokens=20000), metadata=self.md, timeout=60)

    def history(self, sid):
        return self.stub.GetHistory(C.GetHistoryRequest(session_id=sid), metadata=self.md,
                                    timeout=10)

    def artifacts(self, sid):
        return list(self.stub.ListArtifacts(C.ListArtifactsRequest(session_id=sid),
                                            metadata=self.md, timeout=10).artifacts)

    def test_delete_session_takes_everything_in_one_call(self):
        sid = "del-" + uuid.uuid4().hex[:10]
        r = self.compress(sid, chat_with_results(2, "first"))
        made = [a.artifact_id for a in r.report.artifacts]
        self.assertEqual(len(made), 2, r.report.layers)
        self.assertEqual(len(self.history(sid).conversation.messages.messages), 9)
        # An agent's key cannot erase its trail; an operator's can.
        self.assertRpcError(grpc.StatusCode.PERMISSION_DENIED, self.stub.DeleteSession,
                            C.DeleteSessionRequest(session_id=sid), metadata=self.md, timeout=10)
        gone = self.stub.DeleteSession(C.DeleteSessionRequest(session_id=sid),
                                       metadata=self.op_md, timeout=10)
        self.assertEqual((gone.deleted_messages, gone.deleted_artifacts,
                          gone.deleted_compactions), (9, 2, 1))
        for call, req in ((self.stub.GetHistory, C.GetHistoryRequest(session_id=sid)),
                          (self.stub.ListArtifacts, C.ListArtifactsRequest(session_id=sid)),
                          (self.stub.SearchHistory, C.SearchHistoryRequest(session_id=sid,
                                                                           query="log")),
                          (self.stub.GetArtifact, C.GetArtifactRequest(artifact_id=made[0])),
                          (self.stub.DeleteSession, C.DeleteSessionRequest(session_id=sid))):
            with self.subTest(rpc=type(req).__name__):
                md = self.op_md if call is self.stub.DeleteSession else self.md
                self.assertRpcError(grpc.StatusCode.NOT_FOUND, call, req, metadata=md,
                                    timeout=10)
        # The same id starts over as a new session.
        self.compress(sid, chat_with_results(1, "again"), force=False)
        self.assertEqual(len(self.history(sid).conversation.messages.messages), 5)
        # The audit trail says who deleted what.
        events = self.srv.admin().ListAuditEvents(A.ListAuditEventsRequest(
            tenant_id=self.tid, kind="session_deleted"), metadata=self.srv.admin_md(),
            timeout=10).events
        self.assertEqual(len(events), 1)
        self.assertEqual((events[0].target, events[0].actor_role), (sid, "operator"))
        self.assertEqual(json.loads(events[0].before_json),
                         {"messages": 9, "artifacts": 2, "compactions": 1})
        # Bad input names the field.
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, self.stub.DeleteSession,
                            C.DeleteSessionRequest(session_id=""), metadata=self.op_md,
                            timeout=10, contains=("session_id",))

    def test_ctl_session_delete(self):
        sid = "ctl-" + uuid.uuid4().hex[:10]
        self.compress(sid, chat_with_results(1, "ctl"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("CTXGUARD_")}
        env["CTXGUARD_TARGET"] = self.srv.target
        env["CTXGUARD_KEY"] = self.op_md[0][1].split(" ", 1)[1]
        argv = [cgtest.require_env("CG_CTL_BIN"), "session", "delete", sid]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertRegex(done.stdout, r"deleted_messages:\s+5")
        again = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
        self.assertEqual(again.returncode, 1)
        self.assertIn("session_id", again.stderr)

    def test_artifact_cap_keeps_the_newest(self):
        """session_artifacts_max 3, keep 2: a save that leaves more than 3 deletes the oldest
        down to 2; their messages stay in the history."""
        sid = "cap-" + uuid.uuid4().hex[:10]
        self.compress(sid, chat_with_results(2, "one"))
        self.assertEqual(len(self.artifacts(sid)), 2)  # at the cap's keep, under its max
        r = self.compress(sid, chat_with_results(4, "one"))  # the same two, then two more
        kept = self.artifacts(sid)
        newest = [a.artifact_id for a in r.report.artifacts][-2:]
        self.assertEqual([a.artifact_id for a in kept], newest)
        self.assertEqual(len(self.history(sid).conversation.messages.messages), 17)

    def test_retention_days_delete_idle_sessions(self):
        """history_retention_days 1: a session idle for two days goes whole at the next sweep;
        a fresh one and another tenant's stay."""
        old, fresh = "old-" + uuid.uuid4().hex[:8], "new-" + uuid.uuid4().hex[:8]
        for sid in (old, fresh):
            self.compress(sid, chat_with_results(1, sid))
        other_tid = self.srv.create_tenant().tenant_id
        other_md = cgtest.bearer(self.srv.create_key(other_tid, role="agent").secret)
        self.stub.Compress(C.CompressRequest(conversation=chat_with_results(1, "x"),
                                             model="gpt-4o", session_id=old),
                           metadata=other_md, timeout=60)
        settings = A.TenantSettings(history_retention_days=1)
        got = self.srv.admin().UpdateTenantSettings(A.UpdateTenantSettingsRequest(
            tenant_id=self.tid, settings=settings), metadata=self.srv.admin_md(), timeout=10)
        self.assertEqual(got.tenant.settings.history_retention_days, 1)
        # Two days idle (in this server's own schema).
        cgtest.psql(f"UPDATE context_sessions SET updated_at = now() - interval '2 days'"
                    f" WHERE tenant_id = '{self.tid}' AND session_id = '{old}'",
                    dsn=self.srv.dsn)
        cgtest.wait_until(lambda: self._gone(old), timeout=20,
                          what="the idle session deleted by the sweeper")
        self.assertEqual(len(self.history(fresh).conversation.messages.messages), 5)
        other = self.stub.GetHistory(C.GetHistoryRequest(session_id=old), metadata=other_md,
                                     timeout=10)
        self.assertEqual(len(other.conversation.messages.messages), 5)
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT,
                            self.srv.admin().UpdateTenantSettings,
                            A.UpdateTenantSettingsRequest(
                                tenant_id=self.tid,
                                settings=A.TenantSettings(history_retention_days=40000)),
                            metadata=self.srv.admin_md(), timeout=10,
                            contains=("history_retention_days",))

    def _gone(self, sid):
        try:
            self.history(sid)
            return False
        except grpc.RpcError as e:
            return e.code() == grpc.StatusCode.NOT_FOUND
