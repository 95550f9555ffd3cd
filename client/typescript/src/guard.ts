// guard(): reserve -> run -> commit (or release on a throw), with backpressure held by the
// server (default) or waited for here, and REQUIRE_APPROVAL as ApprovalRequired.
import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";

import { Decision, DelayMode, type Reservation, type ReserveResponse, type CommitResponse } from "../gen/ctxguard/v1/budget.js";
import type { CallOpts, Client } from "./client.js";
import { ApprovalRequired } from "./errors.js";
import { scopePath, toScope, type ScopeLike } from "./scope.js";
import { addUsage, emptyUsage, usageFromResponse, usageTotal, type Usage } from "./usage.js";

export interface GuardOptions {
  /** The scope that spends: "session[/task[/agent]]" or an object. */
  scope: ScopeLike;
  /** Tokens to hold: prompt + the most output the call may produce (>= 1). */
  estimatedTokens: number;
  /** The part of estimatedTokens that is output (pricing only). */
  estimatedOutputTokens?: number;
  /** Model, for pricing and as the commit's model. */
  model?: string;
  /**
   * "server" (default): the server holds Reserve's reply for the backpressure delay.
   * "client": Reserve answers at once (RETURN_ONLY) and guard waits the delay here.
   */
  delay?: "server" | "client";
  /** Reservation TTL in ms (0: the budget's). */
  ttlMs?: number;
  /** CountTokens' estimate_id of the prompt (calibration). */
  estimateId?: string;
  /** Reserve's idempotency key (default: a new UUID, which makes Reserve safe to retry). */
  idempotencyKey?: string;
  /**
   * What to do when the function returns without recording usage: "estimate" (default)
   * commits the estimate as input tokens; "release" drops the reservation.
   */
  onMissingUsage?: "estimate" | "release";
  /** Per-call options for Reserve, Commit and Release (deadlines, signal). */
  callOptions?: CallOpts;
}

/** What the guarded function gets: the reservation and a place to record usage. */
export class GuardHandle {
  readonly usage: Usage = emptyUsage();
  model: string;
  /** Set by commitFrom/record when the provider reports the whole prompt. */
  providerInputTokens = 0;
  recorded = false;
  /** The commit's answer, once guard() has committed. */
  commitResponse: CommitResponse | undefined;

  constructor(
    readonly reservation: Reservation,
    readonly reserveResponse: ReserveResponse,
    readonly scope: string,
    model: string,
  ) {
    this.model = model;
  }

  get reservationId(): string {
    return this.reservation.reservationId;
  }

  /** Adds usage to what will be committed (several calls add up). */
  record(usage: Partial<Usage> & { model?: string }): this {
    const { model, ...u } = usage;
    addUsage(this.usage, u);
    if (model) this.model = model;
    this.recorded = true;
    return this;
  }

  /** Records the usage of an OpenAI or Anthropic response (or its usage object). */
  commitFrom(response: unknown): this {
    const u = usageFromResponse(response);
    if (u === null) throw new TypeError("commitFrom: the response has no usage block");
    const model = (response as { model?: unknown } | null)?.model;
    return this.record({ ...u, ...(typeof model === "string" && model ? { model } : {}) });
  }
}

/** Reserves per `opts`; ApprovalRequired on REQUIRE_APPROVAL; waits a client-side delay. */
export async function reserveFor(client: Client, opts: GuardOptions): Promise<GuardHandle> {
  const scope = toScope(opts.scope);
  const tokens = Math.max(1, Math.ceil(opts.estimatedTokens));
  const res = await client.reserve(
    {
      scope,
      tokens,
      // The output part of the estimate cannot be more than the estimate (the server checks).
      estimatedOutputTokens: Math.min(tokens, Math.max(0, Math.ceil(opts.estimatedOutputTokens ?? 0))),
      model: opts.model ?? "",
      ttlMs: opts.ttlMs ?? 0,
      estimateId: opts.estimateId ?? "",
      idempotencyKey: opts.idempotencyKey ?? randomUUID(),
      delayMode: opts.delay === "client" ? DelayMode.DELAY_MODE_RETURN_ONLY : DelayMode.DELAY_MODE_HOLD,
    },
    opts.callOptions,
  );
  if (res.decision === Decision.DECISION_REQUIRE_APPROVAL || !res.reservation) {
    const why = res.reasons.map((r) => r.message).join("; ");
    throw new ApprovalRequired(
      `scope '${scopePath(scope)}' needs approval ${res.approvalId} before spending ${opts.estimatedTokens} tokens${why ? `: ${why}` : ""}`,
      { approvalId: res.approvalId, details: why, method: "ctxguard.v1.BudgetService/Reserve" },
    );
  }
  if (opts.delay === "client" && res.backpressureDelayMs > 0) {
    const signal = opts.callOptions?.signal;
    try {
      await sleep(res.backpressureDelayMs, undefined, signal ? { signal } : undefined);
    } catch (err) {
      await client.release({ reservationId: res.reservation.reservationId }).catch(() => {});
      throw err;
    }
  }
  return new GuardHandle(res.reservation, res, scopePath(scope), opts.model ?? "");
}

/** Commits what the handle recorded (or per onMissingUsage); returns the answer or undefined. */
export async function settle(
  client: Client,
  handle: GuardHandle,
  opts: Pick<GuardOptions, "onMissingUsage" | "callOptions" | "estimatedTokens">,
): Promise<CommitResponse | undefined> {
  let usage: Partial<Usage> = handle.usage;
  if (usageTotal(usage) === 0) {
    if (handle.recorded || opts.onMissingUsage === "release") {
      // Recorded as zero, or nothing and told to release: nothing was spent.
      await client.release({ reservationId: handle.reservationId }, opts.callOptions);
      return undefined;
    }
    usage = { inputTokens: handle.reservation.tokens };
  }
  const res = await client.commit(
    {
      reservationId: handle.reservationId,
      usage,
      model: handle.model,
      providerInputTokens: handle.providerInputTokens,
      recordIfExpired: true,
    },
    opts.callOptions,
  );
  handle.commitResponse = res;
  return res;
}

/** Releases a reservation, never throwing (used on the error path). */
export async function releaseQuietly(client: Client, handle: GuardHandle, opts?: CallOpts): Promise<void> {
  try {
    await client.release({ reservationId: handle.reservationId }, opts);
  } catch {
    // The reservation expires by its TTL; the caller's own error matters more.
  }
}

/**
 * Reserves `estimatedTokens` on `scope`, runs `fn`, then commits what `fn` recorded on
 * the handle (`handle.record({...})` / `handle.commitFrom(response)`). A throw from `fn`
 * releases the reservation and is rethrown. Throws BudgetExhausted (HARD limit),
 * ApprovalRequired (APPROVAL mode; nothing held), ScopeNotFound, Unavailable, ...
 */
export async function guard<T>(client: Client, opts: GuardOptions, fn: (handle: GuardHandle) => Promise<T> | T): Promise<T> {
  const handle = await reserveFor(client, opts);
  let result: T;
  try {
    result = await fn(handle);
  } catch (err) {
    await releaseQuietly(client, handle, opts.callOptions);
    throw err;
  }
  await settle(client, handle, opts);
  return result;
}
