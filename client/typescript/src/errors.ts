// Typed errors: every failed RPC becomes a CtxguardError (or a subclass), read from the
// `grpc-status-details-bin` trailer (google.rpc.Status with ErrorInfo{reason, domain
// "ctxguard", metadata}, BadRequest, RetryInfo) when the server sends one, else from the
// status code and message.
import { Metadata, status as GrpcStatus } from "@grpc/grpc-js";
import { Status } from "../gen/google/rpc/status.js";
import { BadRequest, ErrorInfo, RetryInfo } from "../gen/google/rpc/error_details.js";

/** The gRPC status code names, by number. */
const CODE_NAMES: Record<number, string> = Object.fromEntries(
  Object.entries(GrpcStatus)
    .filter(([, v]) => typeof v === "number")
    .map(([k, v]) => [v as number, k]),
);

export interface CtxguardErrorInit {
  /** gRPC status code (0..16). */
  code: number;
  /** ErrorInfo.reason, or one derived from the code when the server sent none. */
  reason: string;
  /** ErrorInfo.metadata (empty without details). */
  metadata?: Record<string, string>;
  /** The status message as the server wrote it. */
  details?: string;
  /** The RPC, e.g. "BudgetService/Reserve". */
  method?: string;
  /** RetryInfo.retry_delay in milliseconds, when given. */
  retryAfterMs?: number;
  /** BadRequest field violations, when given. */
  fieldViolations?: { field: string; description: string }[];
  /** The error domain (ErrorInfo.domain; "ctxguard" for the server's own). */
  domain?: string;
  cause?: unknown;
}

/** Base of every error this package throws for an RPC. */
export class CtxguardError extends Error {
  /** gRPC status code number (see `codeName`). */
  readonly code: number;
  /** e.g. BUDGET_EXHAUSTED, SCOPE_NOT_FOUND, INVALID_ARGUMENT, UNAVAILABLE. */
  readonly reason: string;
  /** ErrorInfo metadata: key/value strings the server attached. */
  readonly metadata: Record<string, string>;
  /** The server's status message. */
  readonly details: string;
  readonly method: string;
  readonly retryAfterMs: number | undefined;
  readonly fieldViolations: { field: string; description: string }[];
  readonly domain: string;

  constructor(message: string, init: CtxguardErrorInit) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = new.target.name;
    this.code = init.code;
    this.reason = init.reason;
    this.metadata = init.metadata ?? {};
    this.details = init.details ?? "";
    this.method = init.method ?? "";
    this.retryAfterMs = init.retryAfterMs;
    this.fieldViolations = init.fieldViolations ?? [];
    this.domain = init.domain ?? "";
  }

  /** The code's name, e.g. "RESOURCE_EXHAUSTED". */
  get codeName(): string {
    return CODE_NAMES[this.code] ?? String(this.code);
  }
}

/** A HARD limit refused the request (Reserve: RESOURCE_EXHAUSTED / BUDGET_EXHAUSTED). */
export class BudgetExhausted extends CtxguardError {}

/** The scope (or a level of its path) does not exist, or has no budget. */
export class ScopeNotFound extends CtxguardError {}

/** The server (or its store) cannot be reached; retry later. */
export class Unavailable extends CtxguardError {}

/** The request was malformed; `field` names the field the server complained about. */
export class InvalidArgument extends CtxguardError {
  readonly field: string;
  constructor(message: string, init: CtxguardErrorInit & { field: string }) {
    super(message, init);
    this.field = init.field;
  }
}

/**
 * An APPROVAL-mode budget needs an operator's decision before the call may proceed.
 * Reserve answers this as an OK reply with decision REQUIRE_APPROVAL; `guard` turns it
 * into this error. Wait with `client.waitForApproval(approvalId)` and try again.
 */
export class ApprovalRequired extends CtxguardError {
  readonly approvalId: string;
  constructor(message: string, init: Omit<CtxguardErrorInit, "code" | "reason"> & { approvalId: string }) {
    super(message, { ...init, code: GrpcStatus.OK, reason: "APPROVAL_REQUIRED" });
    this.approvalId = init.approvalId;
  }
}

/** What an error looks like when it comes out of @grpc/grpc-js. */
interface GrpcErrorLike {
  code?: number;
  details?: string;
  message?: string;
  metadata?: Metadata;
}

const STATUS_DETAILS_KEY = "grpc-status-details-bin";
const TYPE_PREFIX = "type.googleapis.com/";

interface DecodedDetails {
  status?: Status;
  info?: ErrorInfo;
  badRequest?: BadRequest;
  retry?: RetryInfo;
}

/** Decodes the google.rpc.Status trailer, if any; undecodable bytes count as none. */
export function decodeStatusDetails(md: Metadata | undefined): DecodedDetails {
  const out: DecodedDetails = {};
  const raw = md?.get(STATUS_DETAILS_KEY)?.[0];
  if (raw === undefined || typeof raw === "string") return out;
  try {
    out.status = Status.decode(raw);
  } catch {
    return out;
  }
  for (const any of out.status.details) {
    const type = any.typeUrl.startsWith(TYPE_PREFIX)
      ? any.typeUrl.slice(TYPE_PREFIX.length)
      : any.typeUrl.slice(any.typeUrl.lastIndexOf("/") + 1);
    try {
      if (type === "google.rpc.ErrorInfo" && out.info === undefined) out.info = ErrorInfo.decode(any.value);
      else if (type === "google.rpc.BadRequest" && out.badRequest === undefined)
        out.badRequest = BadRequest.decode(any.value);
      else if (type === "google.rpc.RetryInfo" && out.retry === undefined) out.retry = RetryInfo.decode(any.value);
    } catch {
      // A detail we cannot read is skipped; the others still count.
    }
  }
  return out;
}

/** The field named by a status message: `field 'x' ...`, else a leading `a.b[2].c: ...`. */
export function fieldFromMessage(message: string): string {
  const quoted = /field '([^']+)'/.exec(message);
  if (quoted) return quoted[1]!;
  const lead = /^([A-Za-z_][A-Za-z0-9_]*(?:\[\d+\])*(?:\.[A-Za-z_][A-Za-z0-9_]*(?:\[\d+\])*)*)(?::| is | must )/.exec(
    message,
  );
  return lead ? lead[1]! : "";
}

/** NOT_FOUND without details: what was not found, from the message. */
function notFoundReason(message: string): string {
  const m = message.toLowerCase();
  if (/reservation/.test(m)) return "RESERVATION_NOT_FOUND";
  if (/approval/.test(m)) return "APPROVAL_NOT_FOUND";
  if (/artifact/.test(m)) return "ARTIFACT_NOT_FOUND";
  if (/revision/.test(m)) return "REVISION_NOT_FOUND";
  if (/\bkey_id\b|\btenant_id\b/.test(m)) return "NOT_FOUND";
  return "SCOPE_NOT_FOUND";
}

const FAILED_PRECONDITION_REASONS: [RegExp, string][] = [
  [/expired/i, "RESERVATION_EXPIRED"],
  [/closed/i, "SCOPE_CLOSED"],
];

/** The reason a status code implies when the server sent no ErrorInfo. */
function reasonFromCode(code: number, message: string, method: string): string {
  switch (code) {
    case GrpcStatus.RESOURCE_EXHAUSTED:
      return /\/(Reserve)$/.test(method) ? "BUDGET_EXHAUSTED" : "RESOURCE_EXHAUSTED";
    case GrpcStatus.NOT_FOUND:
      return notFoundReason(message);
    case GrpcStatus.FAILED_PRECONDITION:
      for (const [rx, reason] of FAILED_PRECONDITION_REASONS) if (rx.test(message)) return reason;
      return "FAILED_PRECONDITION";
    default:
      return CODE_NAMES[code] ?? "UNKNOWN";
  }
}

function durationMs(d: { seconds: number; nanos: number } | undefined): number | undefined {
  if (d === undefined) return undefined;
  return Math.max(0, Math.round(d.seconds * 1000 + d.nanos / 1e6));
}

/** Turns whatever a gRPC call failed with into a typed CtxguardError. */
export function fromGrpcError(err: unknown, method = ""): CtxguardError {
  if (err instanceof CtxguardError) return err;
  const e = (err ?? {}) as GrpcErrorLike;
  const code = typeof e.code === "number" ? e.code : GrpcStatus.UNKNOWN;
  const d = decodeStatusDetails(e.metadata);
  const details = d.status?.message || e.details || e.message || "";
  const info = d.info;
  const reason = info?.reason || reasonFromCode(code, details, method);
  const fieldViolations = (d.badRequest?.fieldViolations ?? []).map((v) => ({
    field: v.field,
    description: v.description,
  }));
  const init: CtxguardErrorInit = {
    code,
    reason,
    metadata: { ...(info?.metadata ?? {}) },
    details,
    method,
    retryAfterMs: durationMs(d.retry?.retryDelay),
    fieldViolations,
    domain: info?.domain ?? "",
    cause: err,
  };
  const codeName = CODE_NAMES[code] ?? String(code);
  const text = `${method ? method + ": " : ""}${codeName}${reason !== codeName ? ` (${reason})` : ""}: ${details}`;
  if (reason === "BUDGET_EXHAUSTED") return new BudgetExhausted(text, init);
  if (reason === "SCOPE_NOT_FOUND") return new ScopeNotFound(text, init);
  if (reason === "INVALID_ARGUMENT" || (code === GrpcStatus.INVALID_ARGUMENT && !info)) {
    const field = fieldViolations[0]?.field || init.metadata?.["field"] || fieldFromMessage(details);
    return new InvalidArgument(text, { ...init, field });
  }
  if (code === GrpcStatus.UNAVAILABLE || reason === "STORE_UNAVAILABLE") return new Unavailable(text, init);
  if (code === GrpcStatus.INVALID_ARGUMENT) {
    const field = fieldViolations[0]?.field || init.metadata?.["field"] || fieldFromMessage(details);
    return new InvalidArgument(text, { ...init, field });
  }
  return new CtxguardError(text, init);
}
