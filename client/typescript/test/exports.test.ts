// The package's public surface: the named exports the docs promise.
import assert from "node:assert/strict";
import { test } from "node:test";

import * as pkg from "../src/index.js";

test("named exports", () => {
  for (const name of [
    "Client",
    "AdminClient",
    "guard",
    "wrapOpenAI",
    "wrapAnthropic",
    "usageFromOpenAI",
    "usageFromAnthropic",
    "CtxguardError",
    "BudgetExhausted",
    "ApprovalRequired",
    "ScopeNotFound",
    "Unavailable",
    "InvalidArgument",
    "CtxguardCallbackHandler",
    "BudgetMode",
    "Decision",
    "DelayMode",
    "recall",
    "recallTool",
    "RECALL_TOOL_NAME",
  ]) {
    assert.ok(name in pkg, `missing export ${name}`);
  }
  assert.ok(new pkg.BudgetExhausted("x", { code: 8, reason: "BUDGET_EXHAUSTED" }) instanceof pkg.CtxguardError);
});
