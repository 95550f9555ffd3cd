// A LangChain.js callback handler: reserves at handleChatModelStart / handleLLMStart,
// commits at handleLLMEnd from the messages' usage_metadata (or llmOutput.tokenUsage),
// releases at handleLLMError. @langchain/core is an optional peer dependency: without it
// the handler is a plain object with the same methods (LangChain is not there to call it).
import type { Client } from "./client.js";
import { releaseQuietly, reserveFor, settle, type GuardHandle, type GuardOptions } from "./guard.js";
import type { ScopeLike } from "./scope.js";
import type { Usage } from "./usage.js";

type BaseCtor = new (input?: Record<string, unknown>) => {
  name: string;
  raiseError: boolean;
  awaitHandlers: boolean;
};

class NoLangChainBase {
  raiseError = false;
  awaitHandlers = false;
  constructor(input?: Record<string, unknown>) {
    if (input?.["raiseError"]) this.raiseError = this.awaitHandlers = true;
  }
}

let Base: BaseCtor = NoLangChainBase as unknown as BaseCtor;
try {
  const mod = (await import("@langchain/core/callbacks/base")) as { BaseCallbackHandler: unknown };
  Base = mod.BaseCallbackHandler as BaseCtor;
} catch {
  // @langchain/core is not installed: keep the stand-in.
}

export interface CallbackHandlerOptions extends Omit<GuardOptions, "scope" | "estimatedTokens" | "estimatedOutputTokens" | "model"> {
  client: Client;
  /** The scope each run is charged to. */
  scope: ScopeLike;
  /** The model name when the run's parameters give none (pricing). */
  model?: string;
  /** The output allowance when the run names no max tokens. Default 1,024. */
  defaultOutputTokens?: number;
  /** A custom estimate of a run (prompt + output); default: the server's CountTokens. */
  estimate?: (input: { messages?: { role: string; content: string }[]; prompts?: string[]; model: string }) =>
    | number
    | Promise<number>;
}

type Obj = Record<string, unknown>;
const obj = (v: unknown): Obj | undefined => (v !== null && typeof v === "object" ? (v as Obj) : undefined);
const num = (v: unknown): number => (typeof v === "number" && Number.isFinite(v) && v > 0 ? Math.floor(v) : 0);

/** The text of a LangChain message's content (string or content blocks). */
function textOf(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content
      .map((p) => (typeof p === "string" ? p : typeof obj(p)?.["text"] === "string" ? (obj(p)!["text"] as string) : ""))
      .join("");
  }
  return "";
}

const ROLES: Record<string, string> = {
  human: "user",
  user: "user",
  ai: "assistant",
  assistant: "assistant",
  system: "system",
  developer: "developer",
  tool: "tool",
  function: "tool",
  generic: "user",
};

function roleOf(m: Obj): string {
  const getType = m["_getType"] ?? m["getType"];
  const t = typeof getType === "function" ? String((getType as () => unknown).call(m)) : String(m["role"] ?? "user");
  return ROLES[t] ?? "user";
}

function invocation(extra: unknown): Obj {
  return obj(obj(extra)?.["invocation_params"]) ?? {};
}

function modelName(llm: unknown, extra: unknown, fallback: string): string {
  const ip = invocation(extra);
  for (const v of [ip["model"], ip["model_name"], ip["modelName"], obj(obj(llm)?.["kwargs"])?.["model"]]) {
    if (typeof v === "string" && v) return v;
  }
  return fallback;
}

/** The usage of a run: the generations' usage_metadata, else llmOutput.tokenUsage. */
export function usageFromLLMResult(output: unknown): Usage | null {
  const o = obj(output);
  const gens = Array.isArray(o?.["generations"]) ? (o!["generations"] as unknown[]) : [];
  const total: Usage = { inputTokens: 0, outputTokens: 0, cacheReadTokens: 0, cacheWriteTokens: 0, reasoningTokens: 0 };
  let found = false;
  for (const perPrompt of gens) {
    const first = Array.isArray(perPrompt) ? perPrompt[0] : undefined;
    const um = obj(obj(obj(first)?.["message"])?.["usage_metadata"]);
    if (!um) continue;
    found = true;
    const inDet = obj(um["input_token_details"]) ?? {};
    const outDet = obj(um["output_token_details"]) ?? {};
    const cacheRead = num(inDet["cache_read"]);
    const cacheWrite = num(inDet["cache_creation"]);
    // usage_metadata.input_tokens is the whole prompt, cache reads and writes included.
    total.inputTokens += Math.max(0, num(um["input_tokens"]) - cacheRead - cacheWrite);
    total.outputTokens += num(um["output_tokens"]);
    total.cacheReadTokens += cacheRead;
    total.cacheWriteTokens += cacheWrite;
    total.reasoningTokens += num(outDet["reasoning"]);
  }
  if (found) return total;
  const llmOutput = obj(o?.["llmOutput"]);
  const tu = obj(llmOutput?.["tokenUsage"]) ?? obj(llmOutput?.["estimatedTokenUsage"]) ?? obj(llmOutput?.["usage"]);
  if (!tu) return null;
  total.inputTokens = num(tu["promptTokens"] ?? tu["prompt_tokens"] ?? tu["input_tokens"]);
  total.outputTokens = num(tu["completionTokens"] ?? tu["completion_tokens"] ?? tu["output_tokens"]);
  return total.inputTokens + total.outputTokens > 0 ? total : null;
}

/**
 * Charges every LLM / chat model run to a ctxguard scope. Pass it in `callbacks`:
 * `await model.invoke(messages, { callbacks: [new CtxguardCallbackHandler({client, scope})] })`.
 * A refused reservation (BudgetExhausted, ApprovalRequired) is raised from the run.
 */
export class CtxguardCallbackHandler extends Base {
  name = "ctxguard";
  private readonly opts: CallbackHandlerOptions;
  private readonly runs = new Map<string, Promise<GuardHandle>>();

  constructor(opts: CallbackHandlerOptions) {
    super({ raiseError: true });
    this.opts = opts;
    this.raiseError = true;
    this.awaitHandlers = true;
  }

  /** Runs still holding a reservation (for tests and shutdown). */
  get openRuns(): number {
    return this.runs.size;
  }

  private async start(
    runId: string,
    model: string,
    extra: unknown,
    input: { messages?: { role: string; content: string }[]; prompts?: string[] },
  ): Promise<void> {
    const ip = invocation(extra);
    const output = num(ip["max_completion_tokens"]) || num(ip["max_tokens"]) || num(ip["maxTokens"]) || (this.opts.defaultOutputTokens ?? 1024);
    const begin = async (): Promise<GuardHandle> => {
      let tokens: number;
      let estimateId = "";
      if (this.opts.estimate) tokens = await this.opts.estimate({ ...input, model });
      else if (input.messages) {
        const c = await this.opts.client.countTokens(input.messages, { model }, this.opts.callOptions);
        tokens = c.totalTokens;
        estimateId = c.estimateId;
      } else {
        const c = await this.opts.client.countTokensRaw({ text: (input.prompts ?? []).join("\n"), model }, this.opts.callOptions);
        tokens = c.totalTokens;
        estimateId = c.estimateId;
      }
      const { client, scope, estimate: _e, defaultOutputTokens: _d, model: _m, ...guardOpts } = this.opts;
      return reserveFor(client, {
        ...guardOpts,
        scope,
        estimatedTokens: tokens + output,
        estimatedOutputTokens: output,
        model,
        ...(estimateId ? { estimateId } : {}),
      });
    };
    const p = begin();
    this.runs.set(runId, p);
    try {
      await p;
    } catch (err) {
      this.runs.delete(runId);
      throw err;
    }
  }

  async handleChatModelStart(llm: unknown, messages: unknown[][], runId: string, _parentRunId?: string, extraParams?: unknown): Promise<void> {
    const model = modelName(llm, extraParams, this.opts.model ?? "");
    const msgs = (messages[0] ?? []).map((m) => {
      const o = obj(m) ?? {};
      return { role: roleOf(o), content: textOf(o["content"]) };
    });
    await this.start(runId, model, extraParams, { messages: msgs });
  }

  async handleLLMStart(llm: unknown, prompts: string[], runId: string, _parentRunId?: string, extraParams?: unknown): Promise<void> {
    const model = modelName(llm, extraParams, this.opts.model ?? "");
    await this.start(runId, model, extraParams, { prompts });
  }

  async handleLLMEnd(output: unknown, runId: string): Promise<void> {
    const p = this.runs.get(runId);
    if (!p) return;
    this.runs.delete(runId);
    const handle = await p;
    const u = usageFromLLMResult(output);
    if (u) handle.record(u);
    await settle(this.opts.client, handle, { ...this.opts, estimatedTokens: handle.reservation.tokens });
  }

  async handleLLMError(_err: unknown, runId: string): Promise<void> {
    const p = this.runs.get(runId);
    if (!p) return;
    this.runs.delete(runId);
    const handle = await p.catch(() => undefined);
    if (handle) await releaseQuietly(this.opts.client, handle, this.opts.callOptions);
  }
}
