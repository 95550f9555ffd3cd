// Client: every BudgetService and ContextService RPC as a promise-returning camelCase
// method, with the API key, deadlines, typed errors and retries of UNAVAILABLE for the
// calls that are safe to repeat; plus countTokens / compressMessages / watch helpers.
import {
  ChannelCredentials,
  Metadata,
  status as GrpcStatus,
  type CallOptions,
  type ClientReadableStream,
  type ServiceError,
  type Client as GrpcClient,
} from "@grpc/grpc-js";
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";

import * as admin from "../gen/ctxguard/v1/admin.js";
import * as budget from "../gen/ctxguard/v1/budget.js";
import * as common from "../gen/ctxguard/v1/common.js";
import * as context from "../gen/ctxguard/v1/context.js";
import { ApprovalRequired, CtxguardError, fromGrpcError, Unavailable } from "./errors.js";
import { toScope, type ScopeLike } from "./scope.js";

type DeepPartial<T> = budget.DeepPartial<T>;

/** A request as the methods take it: any subset of fields; `scope`/`parent` may be a path. */
export type Req<T> = {
  [K in keyof T]?: K extends "scope" | "parent" ? ScopeLike | DeepPartial<T[K]> : DeepPartial<T[K]>;
};

export interface TlsOptions {
  /** PEM CA certificate(s) to trust (contents or a file path); default: system roots. */
  rootCerts?: string | Buffer;
  /** PEM client key and certificate for mutual TLS (contents or file paths). */
  privateKey?: string | Buffer;
  certChain?: string | Buffer;
}

export interface RetryOptions {
  /** Attempts in all, the first included; 1 disables retries. Default 4. */
  maxAttempts?: number;
  /** First backoff; doubles each time, with full jitter. Default 100 ms. */
  initialBackoffMs?: number;
  /** Largest backoff. Default 2,000 ms. */
  maxBackoffMs?: number;
  /** Called before each retry (for logging and metrics). */
  onRetry?: (info: { error: CtxguardError; attempt: number; delayMs: number; method: string }) => void;
}

export interface ClientOptions {
  /** host:port; default $CTXGUARD_TARGET, else 127.0.0.1:50051. */
  target?: string;
  /** Tenant API key (cgk_...); default $CTXGUARD_KEY. */
  apiKey?: string;
  /** Deadline of each attempt of a call, in ms. Default 10,000. */
  timeoutMs?: number;
  /** true: TLS with the system roots; an object: TLS with these certificates. */
  tls?: boolean | TlsOptions;
  /** Retries of UNAVAILABLE for idempotent calls. */
  retry?: RetryOptions;
  /** Extra gRPC channel options. */
  channelOptions?: Record<string, string | number>;
  /** Extra metadata sent with every call (e.g. x-request-id). */
  metadata?: Record<string, string>;
}

export interface CallOpts {
  /** This call's deadline per attempt, in ms (default: the client's timeoutMs). */
  timeoutMs?: number;
  /** An absolute deadline for the whole call, retries included. */
  deadline?: Date | number;
  /** Cancels the call. */
  signal?: AbortSignal;
  /** false: no retries for this call. */
  retry?: boolean;
  /** Extra metadata for this call. */
  metadata?: Record<string, string>;
}

type Unary<Q, R> = (req: Q, md: Metadata, opts: Partial<CallOptions>, cb: (e: ServiceError | null, r: R) => void) => {
  cancel(): void;
};

function pem(v: string | Buffer | undefined): Buffer | null {
  if (v === undefined) return null;
  if (Buffer.isBuffer(v)) return v;
  return Buffer.from(v.includes("-----BEGIN") ? v : readFileSync(v, "utf8"));
}

/** Normalizes `scope` / `parent` given as a path or as {session, task, agent}. */
function withScopes<T>(req: Req<T> | undefined): DeepPartial<T> {
  const r: Record<string, unknown> = { ...(req ?? {}) };
  for (const k of ["scope", "parent"]) {
    if (k in r && r[k] !== undefined && r[k] !== null) r[k] = toScope(r[k] as ScopeLike);
  }
  return r as DeepPartial<T>;
}

const abortError = (signal: AbortSignal): Error =>
  signal.reason instanceof Error ? signal.reason : Object.assign(new Error("aborted"), { name: "AbortError" });

/**
 * A ctxguard client. One HTTP/2 channel per service; safe to share; call close() at the end.
 *
 * ```ts
 * const cg = new Client({ target: "127.0.0.1:50051", apiKey: "cgk_..." });
 * await cg.setBudget({ scope: "run1", settings: { limitTokens: 100_000 } });
 * ```
 */
export class Client {
  readonly target: string;
  readonly timeoutMs: number;
  private readonly apiKey: string;
  private readonly retry: Required<Omit<RetryOptions, "onRetry">> & Pick<RetryOptions, "onRetry">;
  private readonly extraMd: Record<string, string>;
  private readonly budgetStub: budget.BudgetServiceClient;
  private readonly contextStub: context.ContextServiceClient;
  /** The raw generated grpc-js stubs, for anything not wrapped here. */
  readonly stubs: { budget: budget.BudgetServiceClient; context: context.ContextServiceClient };

  constructor(opts: ClientOptions = {}) {
    this.target = opts.target || process.env["CTXGUARD_TARGET"] || "127.0.0.1:50051";
    this.apiKey = opts.apiKey ?? process.env["CTXGUARD_KEY"] ?? "";
    this.timeoutMs = opts.timeoutMs ?? 10_000;
    this.retry = {
      maxAttempts: Math.max(1, opts.retry?.maxAttempts ?? 4),
      initialBackoffMs: opts.retry?.initialBackoffMs ?? 100,
      maxBackoffMs: opts.retry?.maxBackoffMs ?? 2_000,
      onRetry: opts.retry?.onRetry,
    };
    this.extraMd = { ...(opts.metadata ?? {}) };
    const creds = Client.credentials(opts.tls);
    // Reconnect quickly after a server restart (grpc-js defaults to 1 s growing to 120 s).
    const channelOptions = {
      "grpc.initial_reconnect_backoff_ms": 100,
      "grpc.max_reconnect_backoff_ms": 1_000,
      ...(opts.channelOptions ?? {}),
    };
    this.budgetStub = new budget.BudgetServiceClient(this.target, creds, channelOptions);
    this.contextStub = new context.ContextServiceClient(this.target, creds, channelOptions);
    this.stubs = { budget: this.budgetStub, context: this.contextStub };
  }

  static credentials(tls: ClientOptions["tls"]): ChannelCredentials {
    if (!tls) return ChannelCredentials.createInsecure();
    if (tls === true) return ChannelCredentials.createSsl();
    return ChannelCredentials.createSsl(pem(tls.rootCerts), pem(tls.privateKey), pem(tls.certChain));
  }

  /** Closes the channels; pending calls fail. */
  close(): void {
    this.budgetStub.close();
    this.contextStub.close();
  }

  // ------------------------------------------------------------------ plumbing ------

  private metadata(extra?: Record<string, string>): Metadata {
    const md = new Metadata();
    if (this.apiKey) md.set("authorization", `Bearer ${this.apiKey}`);
    for (const [k, v] of Object.entries({ ...this.extraMd, ...(extra ?? {}) })) md.set(k, v);
    return md;
  }

  private backoff(attempt: number, hintMs?: number): number {
    const cap = Math.min(this.retry.maxBackoffMs, this.retry.initialBackoffMs * 2 ** attempt);
    const jittered = Math.random() * cap;
    return Math.max(jittered, hintMs ?? 0);
  }

  /** One unary call with deadline, cancellation, typed errors and (when idempotent) retries. */
  private async unary<Q, R>(
    stub: GrpcClient,
    service: string,
    name: string,
    fns: { fromPartial(o: DeepPartial<Q>): Q },
    req: DeepPartial<Q>,
    idempotent: boolean,
    opts: CallOpts = {},
  ): Promise<R> {
    const method = `${service}/${name[0]!.toUpperCase()}${name.slice(1)}`;
    const message = fns.fromPartial(req);
    const fn = (stub as unknown as Record<string, Unary<Q, R>>)[name]!.bind(stub);
    const overall = opts.deadline === undefined ? Infinity : new Date(opts.deadline).getTime();
    const attempts = idempotent && opts.retry !== false ? this.retry.maxAttempts : 1;
    for (let attempt = 0; ; attempt++) {
      if (opts.signal?.aborted) throw abortError(opts.signal);
      const perAttempt = Date.now() + (opts.timeoutMs ?? this.timeoutMs);
      const deadline = new Date(Math.min(perAttempt, overall));
      try {
        return await new Promise<R>((resolve, reject) => {
          const call = fn(message, this.metadata(opts.metadata), { deadline }, (err, res) => {
            opts.signal?.removeEventListener("abort", onAbort);
            if (err) reject(err);
            else resolve(res);
          });
          const onAbort = (): void => call.cancel();
          opts.signal?.addEventListener("abort", onAbort, { once: true });
        });
      } catch (err) {
        if (opts.signal?.aborted) throw abortError(opts.signal);
        const e = fromGrpcError(err, method);
        const retriable = e.code === GrpcStatus.UNAVAILABLE && attempt + 1 < attempts;
        const wait = this.backoff(attempt, e.retryAfterMs);
        if (!retriable || Date.now() + wait >= overall) throw e;
        this.retry.onRetry?.({ error: e, attempt: attempt + 1, delayMs: wait, method });
        await sleep(wait, undefined, opts.signal ? { signal: opts.signal } : undefined).catch(() => {
          throw abortError(opts.signal!);
        });
      }
    }
  }

  private b<Q, R>(name: string, fns: { fromPartial(o: DeepPartial<Q>): Q }, req: DeepPartial<Q>, idem: boolean, o?: CallOpts) {
    return this.unary<Q, R>(this.budgetStub, "ctxguard.v1.BudgetService", name, fns, req, idem, o);
  }

  private c<Q, R>(name: string, fns: { fromPartial(o: DeepPartial<Q>): Q }, req: DeepPartial<Q>, idem: boolean, o?: CallOpts) {
    return this.unary<Q, R>(this.contextStub, "ctxguard.v1.ContextService", name, fns, req, idem, o);
  }

  // ------------------------------------------------------------- BudgetService -----

  /** Creates or replaces a scope's budget (idempotent unless expectedVersion is set). */
  setBudget(req: Req<budget.SetBudgetRequest>, o?: CallOpts): Promise<budget.SetBudgetResponse> {
    const r = withScopes(req);
    return this.b("setBudget", budget.SetBudgetRequest, r, !r.expectedVersion, o);
  }
  getBudget(req: Req<budget.GetBudgetRequest> = {}, o?: CallOpts): Promise<budget.GetBudgetResponse> {
    return this.b("getBudget", budget.GetBudgetRequest, withScopes(req), true, o);
  }
  /** Advisory check; holds nothing. The server holds the reply for backpressure unless RETURN_ONLY. */
  checkBudget(req: Req<budget.CheckBudgetRequest>, o?: CallOpts): Promise<budget.CheckBudgetResponse> {
    return this.b("checkBudget", budget.CheckBudgetRequest, withScopes(req), true, o);
  }
  /**
   * Holds tokens on the scope's path. Retried on UNAVAILABLE only with an idempotencyKey
   * (a retry then gets the same reservation). REQUIRE_APPROVAL is an OK answer: look at
   * `decision` (guard() turns it into ApprovalRequired).
   */
  reserve(req: Req<budget.ReserveRequest>, o?: CallOpts): Promise<budget.ReserveResponse> {
    const r = withScopes(req);
    return this.b("reserve", budget.ReserveRequest, r, !!r.idempotencyKey, o);
  }
  /** Settles a reservation (idempotent by reservation id). */
  commit(req: Req<budget.CommitRequest>, o?: CallOpts): Promise<budget.CommitResponse> {
    return this.b("commit", budget.CommitRequest, withScopes(req), true, o);
  }
  /** Drops a reservation (idempotent). */
  release(req: Req<budget.ReleaseRequest>, o?: CallOpts): Promise<budget.ReleaseResponse> {
    return this.b("release", budget.ReleaseRequest, withScopes(req), true, o);
  }
  /** Records spend without a reservation (idempotent by idempotencyKey, generated when absent). */
  recordUsage(req: Req<budget.RecordUsageRequest>, o?: CallOpts): Promise<budget.RecordUsageResponse> {
    const r = withScopes(req);
    if (!r.idempotencyKey) r.idempotencyKey = randomUUID();
    return this.b("recordUsage", budget.RecordUsageRequest, r, true, o);
  }
  closeScope(req: Req<budget.CloseScopeRequest>, o?: CallOpts): Promise<budget.CloseScopeResponse> {
    return this.b("closeScope", budget.CloseScopeRequest, withScopes(req), true, o);
  }
  getUsage(req: Req<budget.GetUsageRequest> = {}, o?: CallOpts): Promise<budget.GetUsageResponse> {
    return this.b("getUsage", budget.GetUsageRequest, withScopes(req), true, o);
  }
  listScopes(req: Req<budget.ListScopesRequest> = {}, o?: CallOpts): Promise<budget.ListScopesResponse> {
    return this.b("listScopes", budget.ListScopesRequest, withScopes(req), true, o);
  }
  /** Spend over time: fromUnixMs, toUnixMs, stepSeconds (all 0: the last hour by minute). */
  getUsageHistory(req: Req<budget.GetUsageHistoryRequest> = {}, o?: CallOpts): Promise<budget.GetUsageHistoryResponse> {
    return this.b("getUsageHistory", budget.GetUsageHistoryRequest, withScopes(req), true, o);
  }
  resolveApproval(req: Req<budget.ResolveApprovalRequest>, o?: CallOpts): Promise<budget.ResolveApprovalResponse> {
    return this.b("resolveApproval", budget.ResolveApprovalRequest, withScopes(req), true, o);
  }
  getApproval(req: Req<budget.GetApprovalRequest>, o?: CallOpts): Promise<budget.GetApprovalResponse> {
    return this.b("getApproval", budget.GetApprovalRequest, withScopes(req), true, o);
  }
  listApprovals(req: Req<budget.ListApprovalsRequest> = {}, o?: CallOpts): Promise<budget.ListApprovalsResponse> {
    return this.b("listApprovals", budget.ListApprovalsRequest, withScopes(req), true, o);
  }

  /**
   * The WatchUsage stream as an async iterable. Leaving the loop (break, return, throw)
   * cancels the call; a failed stream throws a typed error. No deadline unless one is given.
   */
  watchUsage(req: Req<budget.WatchUsageRequest> = {}, o: Omit<CallOpts, "retry"> = {}): WatchStream {
    const message = budget.WatchUsageRequest.fromPartial(withScopes(req));
    const callOpts: Partial<CallOptions> = {};
    if (o.deadline !== undefined) callOpts.deadline = new Date(o.deadline);
    else if (o.timeoutMs !== undefined) callOpts.deadline = new Date(Date.now() + o.timeoutMs);
    const call = this.budgetStub.watchUsage(message, this.metadata(o.metadata), callOpts);
    return new WatchStream(call, o.signal);
  }

  /** watchUsage for one scope: `for await (const ev of client.watch("run1")) ...`. */
  watch(scope: ScopeLike = "", opts: Omit<Req<budget.WatchUsageRequest>, "scope"> & Omit<CallOpts, "retry"> = {}): WatchStream {
    const { timeoutMs, deadline, signal, metadata, ...req } = opts;
    return this.watchUsage({ ...req, scope }, { timeoutMs, deadline, signal, metadata } as CallOpts);
  }

  /**
   * Waits until an approval is decided (WatchUsage with approval_id); returns it. Throws
   * ApprovalRequired-free: the caller looks at `state` (APPROVED, DENIED, EXPIRED).
   */
  async waitForApproval(approvalId: string, o: Omit<CallOpts, "retry"> = {}): Promise<budget.Approval> {
    for await (const ev of this.watchUsage({ approvalId }, o)) {
      if (ev.type === budget.UsageEventType.USAGE_EVENT_TYPE_APPROVAL_DECIDED && ev.approval) return ev.approval;
    }
    const got = await this.getApproval({ approvalId }, o);
    if (!got.approval) throw new CtxguardError(`approval ${approvalId} vanished`, { code: 5, reason: "APPROVAL_NOT_FOUND" });
    return got.approval;
  }

  // ------------------------------------------------------------ ContextService -----

  countTokensRaw(req: Req<context.CountTokensRequest>, o?: CallOpts): Promise<context.CountTokensResponse> {
    return this.c("countTokens", context.CountTokensRequest, withScopes(req), true, o);
  }
  /** Compress: retried only when stateless or with FULL sync (APPEND would append twice). */
  compress(req: Req<context.CompressRequest>, o?: CallOpts): Promise<context.CompressResponse> {
    const r = withScopes(req);
    const idem = !r.sessionId || r.sessionSync !== context.SessionSync.SESSION_SYNC_APPEND;
    return this.c("compress", context.CompressRequest, r, idem, o);
  }
  summarize(req: Req<context.SummarizeRequest>, o?: CallOpts): Promise<context.SummarizeResponse> {
    return this.c("summarize", context.SummarizeRequest, withScopes(req), true, o);
  }
  getArtifact(req: Req<context.GetArtifactRequest>, o?: CallOpts): Promise<context.GetArtifactResponse> {
    return this.c("getArtifact", context.GetArtifactRequest, withScopes(req), true, o);
  }
  listArtifacts(req: Req<context.ListArtifactsRequest>, o?: CallOpts): Promise<context.ListArtifactsResponse> {
    return this.c("listArtifacts", context.ListArtifactsRequest, withScopes(req), true, o);
  }
  getHistory(req: Req<context.GetHistoryRequest>, o?: CallOpts): Promise<context.GetHistoryResponse> {
    return this.c("getHistory", context.GetHistoryRequest, withScopes(req), true, o);
  }
  /** Deletes a session whole: history, artifacts, boundary, compaction records (operator or admin key). */
  deleteSession(req: Req<context.DeleteSessionRequest>, o?: CallOpts): Promise<context.DeleteSessionResponse> {
    return this.c("deleteSession", context.DeleteSessionRequest, withScopes(req), false, o);
  }
  /** Finds text (or a POSIX extended regular expression) in a session's stored history. */
  searchHistory(req: Req<context.SearchHistoryRequest>, o?: CallOpts): Promise<context.SearchHistoryResponse> {
    return this.c("searchHistory", context.SearchHistoryRequest, withScopes(req), true, o);
  }
  validateContext(req: Req<context.ValidateContextRequest>, o?: CallOpts): Promise<context.ValidateContextResponse> {
    return this.c("validateContext", context.ValidateContextRequest, withScopes(req), true, o);
  }
  getCompressionStats(
    req: Req<context.GetCompressionStatsRequest> = {},
    o?: CallOpts,
  ): Promise<context.GetCompressionStatsResponse> {
    return this.c("getCompressionStats", context.GetCompressionStatsRequest, withScopes(req), true, o);
  }

  /**
   * Counts a message array (OpenAI chat by default; `format: "anthropic"`, `"responses"` or
   * `"gemini"`) the way the model sees it. Returns the server's CountTokensResponse (`totalTokens`,
   * `messageTokens`, `method`, `estimateId`, ...).
   */
  countTokens(messages: unknown[] | ConversationInput, opts: CountOptions = {}, o?: CallOpts): Promise<context.CountTokensResponse> {
    const req: Req<context.CountTokensRequest> = {
      conversation: conversation(messages, opts),
      model: opts.model ?? "",
    };
    if (opts.encoding !== undefined) req.encoding = opts.encoding;
    if (opts.text !== undefined) req.text = opts.text;
    return this.countTokensRaw(req, o);
  }

  /**
   * Compresses a message array; the result is in the same format (and shape) as given.
   * Any CompressRequest field may be passed in `opts` (contextWindowTokens, policy,
   * sessionId, force, summarizer, ...).
   */
  async compressMessages(
    messages: unknown[] | ConversationInput,
    opts: CompressOptions = {},
    o?: CallOpts,
  ): Promise<CompressResult> {
    const { format, tools, system, ...rest } = opts;
    const res = await this.compress(
      { ...rest, conversation: conversation(messages, { format, tools, system }), responseFormat: 0 },
      o,
    );
    const got = messagesOf(res.conversation);
    if (got === undefined) {
      throw new CtxguardError("Compress answered without a JSON conversation", { code: 13, reason: "INTERNAL" });
    }
    return {
      messages: got.messages,
      conversation: got.parsed,
      report: res.report!,
      trimBoundary: res.trimBoundary,
      response: res,
    };
  }
}

/** An object conversation as the provider takes it: `{messages, tools?, system?, model?, ...}`
 * (Responses: `{input, instructions?, ...}`; Gemini: `{contents, systemInstruction?, ...}`). */
export type ConversationInput = { [k: string]: unknown };

export interface ConversationOptions {
  /** "openai" (chat completions, default), "anthropic", "responses" (Responses API input
   * items) or "gemini" (contents). */
  format?: "openai" | "anthropic" | "responses" | "gemini";
  /** Tool definitions in the provider's format. */
  tools?: unknown[];
  /** The top-level system prompt: Anthropic `system`, Responses `instructions`, Gemini
   * `systemInstruction` (a string becomes its one text part). */
  system?: unknown;
}

export interface CountOptions extends ConversationOptions {
  model?: string;
  encoding?: context.TokenEncoding;
  /** Bare text counted on top, no framing. */
  text?: string;
}

export type CompressOptions = ConversationOptions & Omit<Req<context.CompressRequest>, "conversation" | "responseFormat">;

export interface CompressResult {
  /** The compressed messages (Responses: input items; Gemini: contents), in the format given. */
  messages: unknown[];
  /** The whole answer: an array, or the object given with its messages replaced. */
  conversation: unknown;
  report: context.CompressionReport;
  /** Pass back as `trimBoundary` next time (stateless use). */
  trimBoundary: number;
  response: context.CompressResponse;
}

/** Each JSON format: the Conversation field, the request body's key for the messages and its
 * top-level system prompt's key (undefined: the format keeps it in a message). */
const FORMATS = {
  openai: { field: "openaiJson", key: "messages", system: undefined },
  anthropic: { field: "anthropicJson", key: "messages", system: "system" },
  responses: { field: "responsesJson", key: "input", system: "instructions" },
  gemini: { field: "geminiJson", key: "contents", system: "systemInstruction" },
} as const;

/** The wire Conversation for a message array (or object) in a provider's JSON format. */
export function conversation(messages: unknown[] | ConversationInput, opts: ConversationOptions = {}): DeepPartial<common.Conversation> {
  const spec = FORMATS[opts.format ?? "openai"];
  if (spec === undefined) throw new Error(`format ${String(opts.format)}: one of ${Object.keys(FORMATS).join(", ")}`);
  let body: unknown = messages;
  const extra: Record<string, unknown> = {};
  if (opts.tools !== undefined && opts.tools.length > 0) extra["tools"] = opts.tools;
  if (opts.system !== undefined && opts.system !== null && opts.system !== "") {
    if (spec.system === undefined) throw new Error("system is not for format openai (it puts the system prompt in a message)");
    extra[spec.system] =
      spec.system === "systemInstruction" && typeof opts.system === "string" ? { parts: [{ text: opts.system }] } : opts.system;
  }
  if (Object.keys(extra).length > 0) {
    body = Array.isArray(messages) ? { [spec.key]: messages, ...extra } : { ...messages, ...extra };
  }
  return { [spec.field]: JSON.stringify(body) };
}

/** The messages of a JSON answer in any format, and its top-level system prompt if any. */
function messagesOf(conv: common.Conversation | undefined): { parsed: unknown; messages: unknown[] } | undefined {
  for (const spec of Object.values(FORMATS)) {
    const json = conv?.[spec.field];
    if (json === undefined || json === "") continue;
    const parsed = JSON.parse(json) as unknown;
    if (typeof parsed === "string") return { parsed, messages: [{ role: "user", content: parsed }] };
    const messages = Array.isArray(parsed) ? parsed : (((parsed as Record<string, unknown>)[spec.key] as unknown[]) ?? []);
    return { parsed, messages };
  }
  return undefined;
}

/** A WatchUsage stream: async-iterable events; cancel() or leaving the loop ends it. */
export class WatchStream implements AsyncIterable<budget.UsageEvent> {
  constructor(
    readonly call: ClientReadableStream<budget.UsageEvent>,
    private readonly signal?: AbortSignal,
  ) {
    if (signal) {
      if (signal.aborted) call.cancel();
      else signal.addEventListener("abort", () => call.cancel(), { once: true });
    }
    // Errors are delivered through the iterator; keep an unconsumed stream from crashing.
    call.on("error", () => {});
  }

  cancel(): void {
    this.call.cancel();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<budget.UsageEvent> {
    try {
      for await (const ev of this.call as AsyncIterable<budget.UsageEvent>) yield ev;
    } catch (err) {
      const code = (err as { code?: number }).code;
      if (code === GrpcStatus.CANCELLED && (this.signal?.aborted || this.cancelledByUs)) return;
      throw fromGrpcError(err, "ctxguard.v1.BudgetService/WatchUsage");
    } finally {
      this.cancelledByUs = true;
      this.call.cancel();
    }
  }

  private cancelledByUs = false;
}

/** AdminService (admin key): tenants and API keys. */
export class AdminClient {
  private readonly stub: admin.AdminServiceClient;
  private readonly key: string;
  readonly timeoutMs: number;

  constructor(opts: { target?: string; adminKey?: string; tls?: ClientOptions["tls"]; timeoutMs?: number } = {}) {
    const target = opts.target || process.env["CTXGUARD_TARGET"] || "127.0.0.1:50051";
    this.key = opts.adminKey ?? process.env["CTXGUARD_ADMIN_KEY"] ?? "";
    this.timeoutMs = opts.timeoutMs ?? 10_000;
    this.stub = new admin.AdminServiceClient(target, Client.credentials(opts.tls), {
      "grpc.initial_reconnect_backoff_ms": 100,
      "grpc.max_reconnect_backoff_ms": 1_000,
    });
  }

  private call<Q, R>(name: string, fns: { fromPartial(o: DeepPartial<Q>): Q }, req: DeepPartial<Q>): Promise<R> {
    const md = new Metadata();
    if (this.key) md.set("authorization", `Bearer ${this.key}`);
    const fn = (this.stub as unknown as Record<string, Unary<Q, R>>)[name]!.bind(this.stub);
    return new Promise<R>((resolve, reject) => {
      fn(fns.fromPartial(req), md, { deadline: new Date(Date.now() + this.timeoutMs) }, (err, res) =>
        err ? reject(fromGrpcError(err, `ctxguard.v1.AdminService/${name}`)) : resolve(res),
      );
    });
  }

  createTenant(req: DeepPartial<admin.CreateTenantRequest>): Promise<admin.CreateTenantResponse> {
    return this.call("createTenant", admin.CreateTenantRequest, req);
  }
  createApiKey(req: DeepPartial<admin.CreateApiKeyRequest>): Promise<admin.CreateApiKeyResponse> {
    return this.call("createApiKey", admin.CreateApiKeyRequest, req);
  }
  whoAmI(): Promise<admin.WhoAmIResponse> {
    return this.call("whoAmI", admin.WhoAmIRequest, {});
  }
  close(): void {
    this.stub.close();
  }
}

export { ApprovalRequired, Unavailable };
