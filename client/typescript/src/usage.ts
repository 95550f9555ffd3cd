// Usage extractors: a provider's usage block as ctxguard's TokenUsage (input tokens are the
// ones billed at the full input price; cache reads and writes are counted apart).

/** ctxguard's TokenUsage, as Commit and RecordUsage take it. */
export interface Usage {
  inputTokens: number;
  outputTokens: number;
  cacheReadTokens: number;
  cacheWriteTokens: number;
  /** Informational: the part of outputTokens that was reasoning. */
  reasoningTokens: number;
  /** 0: priced by the server from its price table. */
  costMicros?: number;
}

export const emptyUsage = (): Usage => ({
  inputTokens: 0,
  outputTokens: 0,
  cacheReadTokens: 0,
  cacheWriteTokens: 0,
  reasoningTokens: 0,
});

/** Every kind added up (what a budget counts). */
export const usageTotal = (u: Partial<Usage>): number =>
  (u.inputTokens ?? 0) + (u.outputTokens ?? 0) + (u.cacheReadTokens ?? 0) + (u.cacheWriteTokens ?? 0);

/** Adds b into a (in place) and returns a. */
export function addUsage(a: Usage, b: Partial<Usage>): Usage {
  a.inputTokens += b.inputTokens ?? 0;
  a.outputTokens += b.outputTokens ?? 0;
  a.cacheReadTokens += b.cacheReadTokens ?? 0;
  a.cacheWriteTokens += b.cacheWriteTokens ?? 0;
  a.reasoningTokens += b.reasoningTokens ?? 0;
  if (b.costMicros) a.costMicros = (a.costMicros ?? 0) + b.costMicros;
  return a;
}

type Obj = Record<string, unknown>;
const num = (v: unknown): number => (typeof v === "number" && Number.isFinite(v) && v > 0 ? Math.floor(v) : 0);
const obj = (v: unknown): Obj | undefined => (v !== null && typeof v === "object" ? (v as Obj) : undefined);

/** The usage block of a response (or the block itself). */
function usageBlock(response: unknown): Obj | undefined {
  const r = obj(response);
  if (r === undefined) return undefined;
  const u = obj(r["usage"]);
  if (u !== undefined) return u;
  // A Responses API stream event carries the response; Anthropic's message_start the message.
  const inner = obj(r["response"]) ?? obj(r["message"]);
  if (inner !== undefined && obj(inner["usage"]) !== undefined) return obj(inner["usage"]);
  const looksLikeUsage = ["prompt_tokens", "completion_tokens", "input_tokens", "output_tokens"].some((k) => k in r);
  return looksLikeUsage ? r : undefined;
}

/**
 * OpenAI usage: Chat Completions (`prompt_tokens`, `completion_tokens`,
 * `prompt_tokens_details.cached_tokens`) or the Responses API (`input_tokens`,
 * `output_tokens`, `input_tokens_details.cached_tokens`). Cached tokens are part of the
 * prompt: input = prompt - cached. Takes a response, a stream chunk or the usage object;
 * null when there is no usage.
 */
export function usageFromOpenAI(response: unknown): Usage | null {
  const u = usageBlock(response);
  if (u === undefined) return null;
  const chat = "prompt_tokens" in u || "completion_tokens" in u;
  const prompt = num(chat ? u["prompt_tokens"] : u["input_tokens"]);
  const output = num(chat ? u["completion_tokens"] : u["output_tokens"]);
  const inDetails = obj(chat ? u["prompt_tokens_details"] : u["input_tokens_details"]);
  const outDetails = obj(chat ? u["completion_tokens_details"] : u["output_tokens_details"]);
  const cached = Math.min(prompt, num(inDetails?.["cached_tokens"]));
  return {
    inputTokens: prompt - cached,
    outputTokens: output,
    cacheReadTokens: cached,
    cacheWriteTokens: 0,
    reasoningTokens: Math.min(output, num(outDetails?.["reasoning_tokens"])),
  };
}

/**
 * Anthropic usage: `input_tokens` (already without cache), `output_tokens`,
 * `cache_read_input_tokens`, `cache_creation_input_tokens`. Takes a Message, a
 * message_start / message_delta stream event or the usage object; null when none.
 */
export function usageFromAnthropic(response: unknown): Usage | null {
  const u = usageBlock(response);
  if (u === undefined) return null;
  return {
    inputTokens: num(u["input_tokens"]),
    outputTokens: num(u["output_tokens"]),
    cacheReadTokens: num(u["cache_read_input_tokens"]),
    cacheWriteTokens: num(u["cache_creation_input_tokens"]),
    reasoningTokens: 0,
  };
}

/** Whichever provider the response came from (OpenAI when it has OpenAI's fields). */
export function usageFromResponse(response: unknown): Usage | null {
  const u = usageBlock(response);
  if (u === undefined) return null;
  const r = obj(response);
  const openai =
    "prompt_tokens" in u ||
    "completion_tokens" in u ||
    "input_tokens_details" in u ||
    "output_tokens_details" in u ||
    r?.["object"] === "response" ||
    r?.["object"] === "chat.completion" ||
    r?.["object"] === "chat.completion.chunk";
  return openai ? usageFromOpenAI(response) : usageFromAnthropic(response);
}
