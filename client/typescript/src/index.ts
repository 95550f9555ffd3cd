// @ctxguard/client: the TypeScript client of ctxguard.
export {
  AdminClient,
  Client,
  WatchStream,
  conversation,
  type CallOpts,
  type ClientOptions,
  type CompressOptions,
  type CompressResult,
  type ConversationInput,
  type CountOptions,
  type Req,
  type RetryOptions,
  type TlsOptions,
} from "./client.js";
export {
  ApprovalRequired,
  BudgetExhausted,
  CtxguardError,
  InvalidArgument,
  ScopeNotFound,
  Unavailable,
  decodeStatusDetails,
  fieldFromMessage,
  fromGrpcError,
  type CtxguardErrorInit,
} from "./errors.js";
export { GuardHandle, guard, reserveFor, settle, type GuardOptions } from "./guard.js";
export { CtxguardCallbackHandler, usageFromLLMResult, type CallbackHandlerOptions } from "./langchain.js";
export { RECALL_DESCRIPTION, RECALL_PARAMETERS, RECALL_TOOL_NAME, recall, recallTool } from "./recall.js";
export { scopePath, TENANT, toScope, type ScopeLike } from "./scope.js";
export { addUsage, usageFromAnthropic, usageFromOpenAI, usageFromResponse, usageTotal, type Usage } from "./usage.js";
export { GuardedStream, wrapAnthropic, wrapOpenAI, type StreamOutcome, type WrapOptions } from "./wrap.js";

// The wire types and enums, as generated from proto/ctxguard/v1.
export * as budgetpb from "../gen/ctxguard/v1/budget.js";
export * as contextpb from "../gen/ctxguard/v1/context.js";
export * as commonpb from "../gen/ctxguard/v1/common.js";
export * as adminpb from "../gen/ctxguard/v1/admin.js";
export {
  ApprovalState,
  BudgetMode,
  Decision,
  DelayMode,
  ReservationState,
  UsageEventType,
} from "../gen/ctxguard/v1/budget.js";
export { ScopeLevel, ConversationFormat } from "../gen/ctxguard/v1/common.js";
export { CompressionStrategy, SummarizerKind, TokenCountMethod, TokenEncoding } from "../gen/ctxguard/v1/context.js";
