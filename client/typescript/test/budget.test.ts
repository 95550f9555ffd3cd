// guard() and the Client against a real server: commit, release, HARD exhaustion,
// APPROVAL, backpressure (server-held and client-side), typed errors, watch, a server
// restart in the middle of a loop.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  ApprovalRequired,
  ApprovalState,
  BudgetExhausted,
  BudgetMode,
  Client,
  CtxguardError,
  InvalidArgument,
  ScopeNotFound,
  TENANT,
  UsageEventType,
  guard,
  type GuardHandle,
} from "../src/index.js";
import { Server, sid } from "./harness.js";

let server: Server;
let client: Client;
let tenantId: string;

before(async () => {
  server = await new Server().start();
  ({ client, tenantId } = await server.tenantClient());
});

after(async () => {
  client?.close();
  await server?.close();
});

async function usageOf(scope: string) {
  const r = await client.getUsage({ scope });
  return r.root!;
}

describe("guard", () => {
  test("commits what the handle recorded, by kind, and returns the function's value", async () => {
    const s = sid();
    await client.setBudget({ scope: s, settings: { limitTokens: 100_000 } });
    let seen: GuardHandle | undefined;
    const value = await guard(client, { scope: s, estimatedTokens: 5_000, model: "gpt-4o" }, async (h) => {
      seen = h;
      assert.equal((await usageOf(s)).reservedTokens, 5_000, "the estimate is held while the function runs");
      h.record({ inputTokens: 100, outputTokens: 20, cacheReadTokens: 7, cacheWriteTokens: 3 });
      return "done";
    });
    assert.equal(value, "done");
    const u = await usageOf(s);
    assert.equal(u.reservedTokens, 0);
    assert.equal(u.usedTokens, 130);
    assert.equal(u.usage!.inputTokens, 100);
    assert.equal(u.usage!.outputTokens, 20);
    assert.equal(u.usage!.cacheReadTokens, 7);
    assert.equal(u.usage!.cacheWriteTokens, 3);
    assert.equal(seen!.commitResponse?.releasedTokens, 5_000 - 130);
  });

  test("commitFrom takes a provider response (OpenAI cached tokens out of the input)", async () => {
    const s = sid();
    await client.setBudget({ scope: s, settings: { limitTokens: 100_000 } });
    await guard(client, { scope: s, estimatedTokens: 3_000 }, async (h) => {
      h.commitFrom({ model: "gpt-4o", usage: { prompt_tokens: 1500, completion_tokens: 80, prompt_tokens_details: { cached_tokens: 1024 } } });
    });
    const u = await usageOf(s);
    assert.deepEqual([u.usage!.inputTokens, u.usage!.outputTokens, u.usage!.cacheReadTokens], [476, 80, 1024]);
  });

  test("releases on a throw and rethrows the same error", async () => {
    const s = sid();
    await client.setBudget({ scope: s, settings: { limitTokens: 100_000 } });
    const boom = new Error("boom");
    let held = 0;
    await assert.rejects(
      guard(client, { scope: `${s}`, estimatedTokens: 4_000 }, async () => {
        held = (await usageOf(s)).reservedTokens;
        throw boom;
      }),
      (err) => err === boom,
    );
    assert.equal(held, 4_000);
    const u = await usageOf(s);
    assert.equal(u.reservedTokens, 0);
    assert.equal(u.usedTokens, 0);
    assert.equal(u.openReservations, 0);
  });

  test("BudgetExhausted on a HARD limit; the function never runs and nothing is held", async () => {
    const s = sid();
    await client.setBudget({ scope: s, settings: { limitTokens: 1_000, mode: BudgetMode.BUDGET_MODE_HARD } });
    let ran = false;
    await assert.rejects(
      guard(client, { scope: s, estimatedTokens: 5_000 }, async () => {
        ran = true;
      }),
      (err) => {
        assert.ok(err instanceof BudgetExhausted, `got ${String(err)}`);
        assert.equal(err.reason, "BUDGET_EXHAUSTED");
        assert.equal(err.codeName, "RESOURCE_EXHAUSTED");
        // The server's own ErrorInfo, not a fallback: the refusing level and its figures.
        assert.equal(err.metadata.limit_tokens, "1000");
        assert.equal(err.metadata.requested_tokens, "5000");
        assert.equal(err.metadata.level, "session");
        return true;
      },
    );
    assert.equal(ran, false);
    assert.equal((await usageOf(s)).reservedTokens, 0);
  });

  test("ApprovalRequired in APPROVAL mode; approved, the retry passes", async () => {
    const s = sid();
    await client.setBudget({ scope: s, settings: { limitTokens: 1_000, mode: BudgetMode.BUDGET_MODE_APPROVAL } });
    let approvalId = "";
    await assert.rejects(
      guard(client, { scope: s, estimatedTokens: 5_000 }, async () => assert.fail("must not run")),
      (err) => {
        assert.ok(err instanceof ApprovalRequired, `got ${String(err)}`);
        approvalId = err.approvalId;
        return true;
      },
    );
    assert.ok(approvalId, "an approval id");
    const got = await client.getApproval({ approvalId });
    assert.equal(got.approval!.state, ApprovalState.APPROVAL_STATE_PENDING);
    const decided = client.waitForApproval(approvalId, { timeoutMs: 10_000 });
    // The key that opened the approval may not decide it: an operator key does.
    await assert.rejects(
      client.resolveApproval({ approvalId, decision: ApprovalState.APPROVAL_STATE_APPROVED }),
      (err) => {
        assert.ok(err instanceof CtxguardError, `got ${String(err)}`);
        assert.equal(err.codeName, "PERMISSION_DENIED");
        assert.equal(err.reason, "SELF_APPROVAL");
        return true;
      },
    );
    const operator = await server.operatorClient(tenantId);
    try {
      await operator.client.resolveApproval({ approvalId, decision: ApprovalState.APPROVAL_STATE_APPROVED, grantedTokens: 10_000 });
    } finally {
      operator.client.close();
    }
    assert.equal((await decided).state, ApprovalState.APPROVAL_STATE_APPROVED);
    assert.equal((await client.getApproval({ approvalId })).approval!.decidedByKeyId, operator.keyId);
    await guard(client, { scope: s, estimatedTokens: 5_000 }, async (h) => {
      h.record({ inputTokens: 4_000, outputTokens: 100 });
    });
    assert.equal((await usageOf(s)).usedTokens, 4_100);
  });

  for (const delay of ["server", "client"] as const) {
    test(`a 750 ms backpressure delay is honoured (tiers crossing 90 %, delay: '${delay}')`, async () => {
      const s = sid();
      await client.setBudget({ scope: s, settings: { limitTokens: 10_000 } });
      // Below every tier first: no delay.
      let t0 = Date.now();
      await guard(client, { scope: s, estimatedTokens: 100, delay }, (h) => {
        assert.equal(h.reserveResponse.backpressureDelayMs, 0);
        h.record({ inputTokens: 1 });
      });
      await client.recordUsage({ scope: s, usage: { inputTokens: 8_899 } });
      // (8,900 used + 200) / 10,000 = 0.91: the 90 % tier, 750 ms.
      t0 = Date.now();
      let response: GuardHandle["reserveResponse"] | undefined;
      let startedAt = 0;
      await guard(client, { scope: s, estimatedTokens: 200, delay }, (h) => {
        startedAt = Date.now();
        response = h.reserveResponse;
        h.record({ inputTokens: 150 });
      });
      assert.equal(response!.backpressureDelayMs, 750);
      if (delay === "server") assert.ok(response!.delayHeldMs >= 740, `held ${response!.delayHeldMs} ms`);
      else assert.equal(response!.delayHeldMs, 0, "RETURN_ONLY: the server held nothing");
      assert.ok(startedAt - t0 >= 740, `the function started ${startedAt - t0} ms after the call`);
      assert.equal((await usageOf(s)).usedTokens, 9_050);
    });
  }
});

describe("client", () => {
  test("typed errors: ScopeNotFound, InvalidArgument with the field", async () => {
    await assert.rejects(client.reserve({ scope: `${sid("nope")}/t1`, tokens: 10 }), (err) => {
      assert.ok(err instanceof ScopeNotFound, `got ${String(err)}`);
      return true;
    });
    await assert.rejects(client.setBudget({ scope: sid(), settings: { limitTokens: -5 } }), (err) => {
      assert.ok(err instanceof InvalidArgument, `got ${String(err)}`);
      assert.match(err.field, /limit_tokens/);
      return true;
    });
  });

  test("a spend names its scope: none is SCOPE_REQUIRED, TENANT spends on the tenant", async () => {
    for (const scope of [undefined, ""]) {
      await assert.rejects(client.recordUsage({ scope, usage: { inputTokens: 5 } }), (err) => {
        assert.ok(err instanceof InvalidArgument, `got ${String(err)}`);
        assert.equal(err.reason, "SCOPE_REQUIRED");
        assert.equal(err.field, "scope");
        return true;
      });
      await assert.rejects(client.checkBudget({ scope, estimatedTokens: 5 }), InvalidArgument);
      await assert.rejects(client.reserve({ scope, tokens: 5 }), InvalidArgument);
    }
    const before = (await client.getUsage({})).root!.usedTokens;
    await client.recordUsage({ scope: TENANT, usage: { inputTokens: 5 } });
    await client.reserve({ scope: { tenant: true }, tokens: 5 });
    assert.ok((await client.getUsage({})).root!.usedTokens >= before + 5);
  });

  test("scopes as objects; GetUsage depth; ListScopes", async () => {
    const s = sid();
    await client.setBudget({ scope: { session: s }, settings: { limitTokens: 50_000 } });
    await client.setBudget({ scope: `${s}/plan`, settings: { limitTokens: 20_000 } });
    await client.setBudget({ scope: { sessionId: s, taskId: "plan", agentId: "a1" }, settings: { limitTokens: 5_000 } });
    await guard(client, { scope: `${s}/plan/a1`, estimatedTokens: 500 }, (h) => {
      h.record({ inputTokens: 40, outputTokens: 2 });
    });
    const tree = await client.getUsage({ scope: s, depth: 2 });
    assert.equal(tree.root!.usedTokens, 42);
    assert.equal(tree.root!.children[0]!.scope!.taskId, "plan");
    assert.equal(tree.root!.children[0]!.children[0]!.usedTokens, 42);
    const listed = await client.listScopes({ parent: s });
    assert.deepEqual(listed.scopes.map((x) => x.scope!.taskId), ["plan"]);
    const history = await client.getUsageHistory({ scope: `${s}/plan`, stepSeconds: 300 });
    assert.equal(history.stepSeconds, 300);
    assert.equal(history.totalEntries, 1);
    assert.equal(history.total!.inputTokens + history.total!.outputTokens, 42);
    assert.equal(history.points.reduce((n, p) => n + p.entries, 0), 1);
  });

  test("watch(scope) yields the usage events of the scope", async () => {
    const s = sid();
    await client.setBudget({ scope: s, settings: { limitTokens: 50_000 } });
    const ac = new AbortController();
    const stream = client.watch(s, { sendSnapshot: true, minUpdateIntervalMs: 0, signal: ac.signal, timeoutMs: 20_000 });
    const events: number[] = [];
    let recorded = false;
    for await (const ev of stream) {
      events.push(ev.type);
      if (ev.type === UsageEventType.USAGE_EVENT_TYPE_SNAPSHOT && !recorded) {
        recorded = true;
        await client.recordUsage({ scope: s, usage: { inputTokens: 321 } });
      }
      if (ev.type === UsageEventType.USAGE_EVENT_TYPE_USAGE_CHANGED) {
        assert.equal(ev.status!.usedTokens, 321);
        break;
      }
    }
    assert.deepEqual([events[0], events.at(-1)], [UsageEventType.USAGE_EVENT_TYPE_SNAPSHOT, UsageEventType.USAGE_EVENT_TYPE_USAGE_CHANGED]);
  });
});

describe("restart", () => {
  test("a guard loop survives a server restart (Reserve with an idempotency key and Commit are retried)", async () => {
    const own = await new Server().start();
    const retries: string[] = [];
    const { client: c } = await own.tenantClient({
      retry: { maxAttempts: 120, initialBackoffMs: 50, maxBackoffMs: 250, onRetry: (i) => retries.push(`${i.method} ${i.error.codeName}`) },
      timeoutMs: 5_000,
    });
    const s = sid();
    let restarted: Promise<unknown> | undefined;
    try {
      await c.setBudget({ scope: s, settings: { limitTokens: 1_000_000 } });
      const port = own.port;
      let expected = 0;
      for (let i = 0; i < 24; i++) {
        if (i === 8) {
          // Down now; the next iteration runs while the new process starts on the same port.
          await own.stop();
          restarted = own.start(port);
        }
        await guard(c, { scope: s, estimatedTokens: 200 }, (h) => {
          h.record({ inputTokens: 10 + i, outputTokens: 1 });
        });
        expected += 11 + i;
      }
      await restarted;
      const u = await c.getUsage({ scope: s });
      assert.equal(u.root!.usedTokens, expected, "every iteration committed exactly once");
      assert.equal(u.root!.reservedTokens, 0, "no reservation left held");
      assert.ok(retries.length > 0, "the outage was seen (calls were retried)");
      assert.ok(retries.every((r) => r.endsWith("UNAVAILABLE")), retries.join(", "));
    } finally {
      await restarted?.catch(() => {});
      c.close();
      await own.close();
    }
  });

  test("a call that is not idempotent is not retried: Reserve without a key fails Unavailable", async () => {
    const own = await new Server().start();
    let retried = 0;
    const { client: c } = await own.tenantClient({ retry: { maxAttempts: 10, onRetry: () => retried++ } });
    try {
      await c.setBudget({ scope: "x", settings: { limitTokens: 1_000 } });
      await own.stop();
      await assert.rejects(c.reserve({ scope: "x", tokens: 5 }), (err) => err instanceof Error && err.name === "Unavailable");
      assert.equal(retried, 0);
      await assert.rejects(c.getBudget({ scope: "x" }), (err) => err instanceof Error && err.name === "Unavailable");
      assert.equal(retried, 9, "an idempotent read is retried up to maxAttempts");
    } finally {
      c.close();
      await own.close();
    }
  });
});

