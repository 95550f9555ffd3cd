// No server: error mapping (the grpc-status-details-bin trailer and the fallbacks), usage
// extractors, scope paths.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Metadata, status } from "@grpc/grpc-js";

import { Any } from "../gen/google/protobuf/any.js";
import { BadRequest, ErrorInfo, RetryInfo } from "../gen/google/rpc/error_details.js";
import { Status } from "../gen/google/rpc/status.js";
import {
  BudgetExhausted,
  CtxguardError,
  InvalidArgument,
  ScopeNotFound,
  Unavailable,
  fromGrpcError,
  toScope,
  scopePath,
  usageFromAnthropic,
  usageFromOpenAI,
  usageFromLLMResult,
} from "../src/index.js";

function grpcError(code: number, details: string, st?: Status): Error & { code: number; details: string; metadata: Metadata } {
  const md = new Metadata();
  if (st) md.set("grpc-status-details-bin", Buffer.from(Status.encode(st).finish()));
  return Object.assign(new Error(`${code} ${details}`), { code, details, metadata: md });
}

const any = (type: string, bytes: Uint8Array): Any => ({ typeUrl: `type.googleapis.com/${type}`, value: Buffer.from(bytes) });

test("details: ErrorInfo reason decides the class; metadata, domain and RetryInfo are kept", () => {
  const st: Status = {
    code: status.RESOURCE_EXHAUSTED,
    message: "task: 9,800 + 400 > 10,000 tokens (HARD)",
    details: [
      any("google.rpc.ErrorInfo", ErrorInfo.encode({ reason: "BUDGET_EXHAUSTED", domain: "ctxguard", metadata: { level: "task", limit_tokens: "10000" } }).finish()),
      any("google.rpc.RetryInfo", RetryInfo.encode({ retryDelay: { seconds: 1, nanos: 500_000_000 } }).finish()),
    ],
  };
  const e = fromGrpcError(grpcError(st.code, st.message, st), "ctxguard.v1.BudgetService/CheckBudget");
  assert.ok(e instanceof BudgetExhausted, e.constructor.name);
  assert.ok(e instanceof CtxguardError);
  assert.equal(e.code, status.RESOURCE_EXHAUSTED);
  assert.equal(e.codeName, "RESOURCE_EXHAUSTED");
  assert.equal(e.reason, "BUDGET_EXHAUSTED");
  assert.equal(e.domain, "ctxguard");
  assert.deepEqual(e.metadata, { level: "task", limit_tokens: "10000" });
  assert.equal(e.retryAfterMs, 1500);
  assert.equal(e.details, st.message);
});

test("details: BadRequest names the field of InvalidArgument", () => {
  const st: Status = {
    code: status.INVALID_ARGUMENT,
    message: "settings.limit_tokens must be >= 1",
    details: [
      any("google.rpc.ErrorInfo", ErrorInfo.encode({ reason: "INVALID_ARGUMENT", domain: "ctxguard", metadata: {} }).finish()),
      any("google.rpc.BadRequest", BadRequest.encode({ fieldViolations: [{ field: "settings.limit_tokens", description: "must be >= 1" }] }).finish()),
    ],
  };
  const e = fromGrpcError(grpcError(st.code, st.message, st));
  assert.ok(e instanceof InvalidArgument);
  assert.equal((e as InvalidArgument).field, "settings.limit_tokens");
  assert.deepEqual(e.fieldViolations, [{ field: "settings.limit_tokens", description: "must be >= 1" }]);
});

test("details: SCOPE_NOT_FOUND and STORE_UNAVAILABLE reasons; unknown reasons stay CtxguardError", () => {
  const mk = (code: number, reason: string) =>
    fromGrpcError(
      grpcError(code, "x", { code, message: "x", details: [any("google.rpc.ErrorInfo", ErrorInfo.encode({ reason, domain: "ctxguard", metadata: {} }).finish())] }),
    );
  assert.ok(mk(status.NOT_FOUND, "SCOPE_NOT_FOUND") instanceof ScopeNotFound);
  assert.ok(mk(status.UNAVAILABLE, "STORE_UNAVAILABLE") instanceof Unavailable);
  const other = mk(status.NOT_FOUND, "RESERVATION_NOT_FOUND");
  assert.equal(other.constructor, CtxguardError);
  assert.equal(other.reason, "RESERVATION_NOT_FOUND");
  const expired = mk(status.FAILED_PRECONDITION, "RESERVATION_EXPIRED");
  assert.equal(expired.reason, "RESERVATION_EXPIRED");
});

test("details: a corrupt trailer falls back to the status code", () => {
  const err = grpcError(status.NOT_FOUND, "scope.session_id: no such session");
  err.metadata.set("grpc-status-details-bin", Buffer.from([0xff, 0xff, 0xff]));
  assert.ok(fromGrpcError(err) instanceof ScopeNotFound);
});

test("fallback without details: codes and messages", () => {
  const reserve = fromGrpcError(grpcError(status.RESOURCE_EXHAUSTED, "session: 10 + 5000 > 1000"), "ctxguard.v1.BudgetService/Reserve");
  assert.ok(reserve instanceof BudgetExhausted);
  assert.equal(reserve.reason, "BUDGET_EXHAUSTED");
  const tooBig = fromGrpcError(grpcError(status.RESOURCE_EXHAUSTED, "message too large"), "ctxguard.v1.ContextService/Compress");
  assert.equal(tooBig.constructor, CtxguardError);
  assert.ok(fromGrpcError(grpcError(status.NOT_FOUND, "scope.task_id: no such task")) instanceof ScopeNotFound);
  const resv = fromGrpcError(grpcError(status.NOT_FOUND, "reservation_id: no such reservation"));
  assert.equal(resv.constructor, CtxguardError);
  assert.equal(resv.reason, "RESERVATION_NOT_FOUND");
  assert.ok(fromGrpcError(grpcError(status.UNAVAILABLE, "connect failed")) instanceof Unavailable);
  const ia = fromGrpcError(grpcError(status.INVALID_ARGUMENT, "field 'name' is required"));
  assert.ok(ia instanceof InvalidArgument);
  assert.equal((ia as InvalidArgument).field, "name");
  const ia2 = fromGrpcError(grpcError(status.INVALID_ARGUMENT, "scope.task_id: contains a space"));
  assert.equal((ia2 as InvalidArgument).field, "scope.task_id");
  const unauth = fromGrpcError(grpcError(status.UNAUTHENTICATED, "no key"));
  assert.equal(unauth.reason, "UNAUTHENTICATED");
});

test("usageFromOpenAI: chat completions (cached is part of the prompt) and the Responses API", () => {
  assert.deepEqual(
    usageFromOpenAI({
      usage: {
        prompt_tokens: 1500,
        completion_tokens: 80,
        total_tokens: 1580,
        prompt_tokens_details: { cached_tokens: 1024 },
        completion_tokens_details: { reasoning_tokens: 30 },
      },
    }),
    { inputTokens: 476, outputTokens: 80, cacheReadTokens: 1024, cacheWriteTokens: 0, reasoningTokens: 30 },
  );
  assert.deepEqual(
    usageFromOpenAI({
      object: "response",
      usage: { input_tokens: 900, output_tokens: 12, input_tokens_details: { cached_tokens: 100 }, output_tokens_details: { reasoning_tokens: 0 } },
    }),
    { inputTokens: 800, outputTokens: 12, cacheReadTokens: 100, cacheWriteTokens: 0, reasoningTokens: 0 },
  );
  assert.equal(usageFromOpenAI({ choices: [] }), null);
  assert.equal(usageFromOpenAI({ usage: null }), null);
});

test("usageFromAnthropic: input excludes cache; reads and writes counted apart", () => {
  assert.deepEqual(
    usageFromAnthropic({ type: "message", usage: { input_tokens: 21, output_tokens: 300, cache_read_input_tokens: 5000, cache_creation_input_tokens: 1200 } }),
    { inputTokens: 21, outputTokens: 300, cacheReadTokens: 5000, cacheWriteTokens: 1200, reasoningTokens: 0 },
  );
  assert.deepEqual(usageFromAnthropic({ type: "message_start", message: { usage: { input_tokens: 3, output_tokens: 1 } } })?.inputTokens, 3);
});

test("usageFromLLMResult: usage_metadata (cache split out), else llmOutput.tokenUsage", () => {
  assert.deepEqual(
    usageFromLLMResult({
      generations: [[{ text: "x", message: { usage_metadata: { input_tokens: 1500, output_tokens: 7, total_tokens: 1507, input_token_details: { cache_read: 1024 } } } }]],
    }),
    { inputTokens: 476, outputTokens: 7, cacheReadTokens: 1024, cacheWriteTokens: 0, reasoningTokens: 0 },
  );
  assert.deepEqual(usageFromLLMResult({ generations: [[{ text: "x" }]], llmOutput: { tokenUsage: { promptTokens: 10, completionTokens: 4 } } }), {
    inputTokens: 10,
    outputTokens: 4,
    cacheReadTokens: 0,
    cacheWriteTokens: 0,
    reasoningTokens: 0,
  });
  assert.equal(usageFromLLMResult({ generations: [] }), null);
});

test("scopes: paths and objects", () => {
  assert.deepEqual(toScope("s1/t1/a1"), { sessionId: "s1", taskId: "t1", agentId: "a1", tenant: false });
  assert.deepEqual(toScope(""), { sessionId: "", taskId: "", agentId: "", tenant: false });
  assert.deepEqual(toScope("-"), { sessionId: "", taskId: "", agentId: "", tenant: false });
  assert.deepEqual(toScope({ session: "s", task: "t" }), { sessionId: "s", taskId: "t", agentId: "", tenant: false });
  assert.deepEqual(toScope({ sessionId: "s" }), { sessionId: "s", taskId: "", agentId: "", tenant: false });
  assert.throws(() => toScope("a//b"), TypeError);
  assert.throws(() => toScope("a/b/c/d"), TypeError);
  assert.equal(scopePath({ sessionId: "s", taskId: "t" }), "s/t");
});
