// wrapOpenAI / wrapAnthropic: the SDK client with chat.completions.create (OpenAI) or
// messages.create (Anthropic) going through reserve -> call -> commit; streams are passed
// through chunk by chunk and committed from the usage they end with.
import type { CallOpts, Client } from "./client.js";
import { releaseQuietly, reserveFor, settle, type GuardHandle, type GuardOptions } from "./guard.js";
import type { ScopeLike } from "./scope.js";
import { usageFromAnthropic, usageFromOpenAI, type Usage } from "./usage.js";

type Params = Record<string, unknown>;

export interface WrapOptions extends Omit<GuardOptions, "scope" | "estimatedTokens" | "estimatedOutputTokens" | "model"> {
  /** The ctxguard client. */
  client: Client;
  /** The scope every call is charged to; a function picks one per call. */
  scope: ScopeLike | ((params: Params) => ScopeLike);
  /**
   * The prompt+output estimate per call. Default: the server's CountTokens of the
   * messages (with tools and system) plus the call's max tokens (or defaultOutputTokens).
   */
  estimate?: (params: Params) => number | Promise<number>;
  /** The output allowance when the call names no max tokens. Default 1,024. */
  defaultOutputTokens?: number;
  /** Called after each commit (or release) with the usage committed; for logging. */
  onSettled?: (info: { usage: Usage; handle: GuardHandle; params: Params }) => void;
}

const num = (v: unknown): number => (typeof v === "number" && Number.isFinite(v) && v > 0 ? v : 0);

async function estimateFor(
  opts: WrapOptions,
  params: Params,
  format: "openai" | "anthropic",
): Promise<{ tokens: number; output: number; estimateId: string }> {
  const output =
    num(params["max_completion_tokens"]) || num(params["max_tokens"]) || (opts.defaultOutputTokens ?? 1024);
  if (opts.estimate) return { tokens: Math.max(1, await opts.estimate(params)), output, estimateId: "" };
  const counted = await opts.client.countTokens(
    (params["messages"] as unknown[]) ?? [],
    {
      format,
      model: typeof params["model"] === "string" ? (params["model"] as string) : "",
      ...(Array.isArray(params["tools"]) ? { tools: params["tools"] as unknown[] } : {}),
      ...(format === "anthropic" && params["system"] !== undefined ? { system: params["system"] } : {}),
    },
    opts.callOptions,
  );
  return { tokens: counted.totalTokens + output, output, estimateId: counted.estimateId };
}

async function begin(opts: WrapOptions, params: Params, format: "openai" | "anthropic"): Promise<GuardHandle> {
  const est = await estimateFor(opts, params, format);
  const scope = typeof opts.scope === "function" ? opts.scope(params) : opts.scope;
  const { client, estimate: _e, defaultOutputTokens: _d, onSettled: _s, scope: _sc, ...guardOpts } = opts;
  return reserveFor(client, {
    ...guardOpts,
    scope,
    estimatedTokens: est.tokens,
    estimatedOutputTokens: est.output,
    model: typeof params["model"] === "string" ? (params["model"] as string) : "",
    ...(est.estimateId ? { estimateId: est.estimateId } : {}),
  });
}

async function finish(opts: WrapOptions, handle: GuardHandle, params: Params): Promise<void> {
  await settle(opts.client, handle, { ...opts, estimatedTokens: handle.reservation.tokens });
  opts.onSettled?.({ usage: handle.usage, handle, params });
}

/** How a stream ended: read to the end, failed, or left early by the consumer. */
export type StreamOutcome = "ok" | "failed" | "left";

/**
 * A stream passed through from the SDK: iterate it as the SDK's own. Usage is committed
 * when it ends (from the usage it reported); an error while streaming releases the
 * reservation (unless usage had arrived); a consumer that stops early still pays for what
 * the provider generated (the usage seen, else the estimate). `controller` aborts the HTTP
 * request as the SDK's does.
 */
export class GuardedStream<T> implements AsyncIterable<T> {
  private used = false;

  constructor(
    private readonly inner: AsyncIterable<T> & { controller?: AbortController },
    /** The guard's handle (reservation, usage recorded so far, commit answer). */
    readonly handle: GuardHandle,
    private readonly onChunk: (chunk: T) => boolean,
    private readonly done: (outcome: StreamOutcome) => Promise<void>,
  ) {}

  get controller(): AbortController | undefined {
    return this.inner.controller;
  }

  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    if (this.used) throw new Error("this stream was already iterated");
    this.used = true;
    let outcome: StreamOutcome = "left";
    try {
      for await (const chunk of this.inner) {
        if (this.onChunk(chunk)) yield chunk;
      }
      outcome = "ok";
    } catch (err) {
      outcome = "failed";
      throw err;
    } finally {
      await this.done(outcome);
    }
  }
}

/** Replaces `obj[path[0]][path[1]]...[last]` with `wrap(original)` behind proxies. */
function proxyPath<T extends object>(target: T, path: string[], wrap: (orig: (...a: unknown[]) => unknown, self: object) => unknown): T {
  const [head, ...rest] = path;
  return new Proxy(target, {
    get(t, prop, receiver) {
      const v = Reflect.get(t, prop, receiver);
      if (prop !== head || v === null || (typeof v !== "object" && typeof v !== "function")) return v;
      if (rest.length === 0) return wrap((v as (...a: unknown[]) => unknown).bind(t), t);
      return proxyPath(v as object, rest, wrap);
    },
  });
}

/** Runs the provider call; when it throws, gives the reservation back and rethrows. */
async function callOrRelease<R>(opts: WrapOptions, handle: GuardHandle, call: () => Promise<R>): Promise<R> {
  try {
    return await call();
  } catch (err) {
    await releaseQuietly(opts.client, handle, opts.callOptions);
    throw err;
  }
}

/** A non-streaming call: the usage its response reports (read by `extract`) is committed. */
async function plainCall(
  opts: WrapOptions,
  handle: GuardHandle,
  params: Params,
  call: () => Promise<unknown>,
  extract: (res: unknown) => Usage | null,
): Promise<unknown> {
  const res = await callOrRelease(opts, handle, call);
  const u = extract(res);
  if (u) handle.record({ ...u, ...modelOf(res) });
  await finish(opts, handle, params);
  return res;
}

/** A stream's end: released when it failed before any usage was seen, else committed. */
function streamSettler(opts: WrapOptions, handle: GuardHandle, params: Params) {
  return async (outcome: StreamOutcome): Promise<void> => {
    if (outcome === "failed" && !handle.recorded) await releaseQuietly(opts.client, handle, opts.callOptions);
    else await finish(opts, handle, params);
  };
}

/**
 * The OpenAI client with `chat.completions.create` guarded. Non-streaming calls commit
 * the response's usage (cached prompt tokens as cache reads); `stream: true` calls get
 * `stream_options.include_usage` and commit the final usage chunk (which is yielded only
 * when the caller asked for it). A failed call releases the reservation and rethrows.
 * Everything else on the client is the SDK's own.
 */
export function wrapOpenAI<T extends object>(openai: T, options: WrapOptions): T {
  return proxyPath(openai, ["chat", "completions", "create"], (create) => {
    return async (params: Params, requestOptions?: unknown) => {
      const handle = await begin(options, params, "openai");
      if (!params["stream"])
        return plainCall(options, handle, params, async () => create(params, requestOptions), usageFromOpenAI);
      const callerWantsUsage = (params["stream_options"] as { include_usage?: boolean } | undefined)?.include_usage === true;
      const sent = { ...params, stream_options: { ...((params["stream_options"] as object) ?? {}), include_usage: true } };
      const inner = (await callOrRelease(options, handle, async () => create(sent, requestOptions))) as AsyncIterable<unknown> & {
        controller?: AbortController;
      };
      return new GuardedStream(
        inner,
        handle,
        (chunk) => {
          const c = chunk as { usage?: unknown; choices?: unknown[]; model?: string };
          if (c.usage) {
            const u = usageFromOpenAI(c);
            if (u) {
              handle.usage.inputTokens = u.inputTokens;
              handle.usage.outputTokens = u.outputTokens;
              handle.usage.cacheReadTokens = u.cacheReadTokens;
              handle.usage.reasoningTokens = u.reasoningTokens;
              handle.recorded = true;
              if (c.model) handle.model = c.model;
            }
            return callerWantsUsage || (c.choices?.length ?? 0) > 0;
          }
          return true;
        },
        streamSettler(options, handle, params),
      );
    };
  });
}

/**
 * The Anthropic client with `messages.create` guarded: usage from the Message (input,
 * output, cache reads and writes), or for `stream: true` from message_start's usage
 * updated by message_delta's. A failed call releases the reservation and rethrows.
 */
export function wrapAnthropic<T extends object>(anthropic: T, options: WrapOptions): T {
  return proxyPath(anthropic, ["messages", "create"], (create) => {
    return async (params: Params, requestOptions?: unknown) => {
      const handle = await begin(options, params, "anthropic");
      if (!params["stream"])
        return plainCall(options, handle, params, async () => create(params, requestOptions), usageFromAnthropic);
      const inner = (await callOrRelease(options, handle, async () => create(params, requestOptions))) as AsyncIterable<unknown> & {
        controller?: AbortController;
      };
      return new GuardedStream(
        inner,
        handle,
        (event) => {
          const e = event as { type?: string; message?: { usage?: Record<string, unknown>; model?: string }; usage?: Record<string, unknown> };
          const raw = e.type === "message_start" ? e.message?.usage : e.type === "message_delta" ? e.usage : undefined;
          if (raw) {
            // message_delta's counts are cumulative; a field it leaves out keeps its value.
            const u = usageFromAnthropic({ usage: raw })!;
            if ("input_tokens" in raw && raw["input_tokens"] != null) handle.usage.inputTokens = u.inputTokens;
            if ("output_tokens" in raw && raw["output_tokens"] != null) handle.usage.outputTokens = u.outputTokens;
            if ("cache_read_input_tokens" in raw && raw["cache_read_input_tokens"] != null)
              handle.usage.cacheReadTokens = u.cacheReadTokens;
            if ("cache_creation_input_tokens" in raw && raw["cache_creation_input_tokens"] != null)
              handle.usage.cacheWriteTokens = u.cacheWriteTokens;
            handle.recorded = true;
            if (e.message?.model) handle.model = e.message.model;
          }
          return true;
        },
        streamSettler(options, handle, params),
      );
    };
  });
}

function modelOf(res: unknown): { model?: string } {
  const m = (res as { model?: unknown } | null)?.model;
  return typeof m === "string" && m ? { model: m } : {};
}

export type { CallOpts };
