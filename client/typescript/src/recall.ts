// The ctxguard_recall tool: lets an agent read back what Compress took out of its context.
//
// Compress leaves a pointer wherever it reduced something ("[trimmed: history 12]", "[ctxguard
// summary of messages 3-41 (session history positions; ...)]", "the whole result: history 12",
// an offloaded result's artifact id). Give the model recallTool() among its tools; when it
// calls ctxguard_recall, answer with recall(client, sessionId, args): it maps the call onto
// GetHistory, GetArtifact or SearchHistory and returns text for the tool result.
import * as common from "../gen/ctxguard/v1/common.js";
import type * as context from "../gen/ctxguard/v1/context.js";
import type { Client } from "./client.js";
import { CtxguardError } from "./errors.js";

export const RECALL_TOOL_NAME = "ctxguard_recall";

export const RECALL_DESCRIPTION =
  "Read back what context compression removed or shortened in this conversation. Use it " +
  "when a message says [trimmed: history N], [ctxguard summary of messages A-B ...], " +
  "'the whole result: history N' or names an artifact (art_...), or when you need " +
  "something said earlier that is no longer in view. Give exactly one of: from_position " +
  "(with to_position for a range) to read original messages; artifact_id to read an " +
  "offloaded tool result; query to search the whole saved history.";

/** The JSON schema of the tool's arguments (the same as the Python package's). */
export const RECALL_PARAMETERS = {
  type: "object",
  properties: {
    from_position: {
      type: "integer",
      minimum: 0,
      description: "First history position to read (the N of 'history N', the A of 'messages A-B').",
    },
    to_position: {
      type: "integer",
      minimum: 0,
      description:
        "Last position to read, inclusive (the B of 'messages A-B'); at most 50 messages after from_position. Default: from_position.",
    },
    artifact_id: { type: "string", description: "An offloaded tool result's id, as the preview names it." },
    offset: { type: "integer", minimum: 0, description: "With artifact_id: first byte to read. Default 0." },
    query: {
      type: "string",
      minLength: 1,
      maxLength: 1000,
      description: "Text to search the saved history for (case-insensitive).",
    },
    regex: { type: "boolean", description: "With query: it is a POSIX extended regular expression." },
  },
  additionalProperties: false,
} as const;

const RANGE_MAX = 50;
const TEXT_MAX = 20000;

/** The tool definition for "openai" (chat completions), "anthropic", "responses", "gemini" (a
 * function declaration, for `tools: [{ functionDeclarations: [...] }]`) or "schema". */
export function recallTool(
  format: "openai" | "anthropic" | "responses" | "gemini" | "schema" = "openai",
): Record<string, unknown> {
  switch (format) {
    case "openai":
      return {
        type: "function",
        function: { name: RECALL_TOOL_NAME, description: RECALL_DESCRIPTION, parameters: RECALL_PARAMETERS },
      };
    case "anthropic":
      return { name: RECALL_TOOL_NAME, description: RECALL_DESCRIPTION, input_schema: RECALL_PARAMETERS };
    case "responses":
      return { type: "function", name: RECALL_TOOL_NAME, description: RECALL_DESCRIPTION, parameters: RECALL_PARAMETERS };
    case "gemini":
      return { name: RECALL_TOOL_NAME, description: RECALL_DESCRIPTION, parametersJsonSchema: RECALL_PARAMETERS };
    case "schema":
      return { name: RECALL_TOOL_NAME, description: RECALL_DESCRIPTION, parameters: RECALL_PARAMETERS };
  }
  throw new Error(`format ${String(format)}: one of openai, anthropic, responses, gemini, schema`);
}

function nonNegative(args: Record<string, unknown>, key: string, dflt: number): number {
  const v = args[key] ?? dflt;
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0) throw new Error(`${key} must be a non-negative integer`);
  return v;
}

const ROLES: Record<number, string> = {
  [common.Role.ROLE_SYSTEM]: "system",
  [common.Role.ROLE_USER]: "user",
  [common.Role.ROLE_ASSISTANT]: "assistant",
  [common.Role.ROLE_TOOL]: "tool",
  [common.Role.ROLE_DEVELOPER]: "developer",
};

function cut(text: string): string {
  return text.length <= TEXT_MAX
    ? text
    : `${text.slice(0, TEXT_MAX)}\n[ctxguard_recall: ${text.length - TEXT_MAX} more characters]`;
}

function partText(p: common.MessagePart): string {
  if (p.text !== undefined) return p.text;
  if (p.toolCall) return `[tool call ${p.toolCall.name} ${p.toolCall.id}] ${p.toolCall.argumentsJson}`;
  if (p.toolResult) return `[tool result ${p.toolResult.toolCallId}] ${p.toolResult.content}`;
  if (p.reasoning) return `[reasoning] ${p.reasoning.text}`;
  return "[image]";
}

async function runOne(client: Client, sessionId: string, raw: string | Record<string, unknown>): Promise<string> {
  let args: unknown = raw;
  if (typeof raw === "string") {
    try {
      args = JSON.parse(raw || "{}");
    } catch (e) {
      throw new Error(`arguments are not JSON: ${(e as Error).message}`);
    }
  }
  if (typeof args !== "object" || args === null || Array.isArray(args)) throw new Error("arguments must be a JSON object");
  const a = args as Record<string, unknown>;
  const unknown = Object.keys(a).filter((k) => !(k in RECALL_PARAMETERS.properties));
  if (unknown.length) throw new Error(`unknown argument '${unknown.sort()[0]}'`);
  const given = ["from_position", "artifact_id", "query"].filter((k) => k in a);
  if (given.length !== 1) throw new Error("give exactly one of from_position, artifact_id, query");
  if (given[0] === "artifact_id") {
    if (typeof a.artifact_id !== "string" || !a.artifact_id) throw new Error("artifact_id must be a non-empty string");
    const r: context.GetArtifactResponse = await client.getArtifact({
      artifactId: a.artifact_id,
      offset: nonNegative(a, "offset", 0),
      length: TEXT_MAX * 4,
    });
    const text = Buffer.from(r.content).toString("utf8");
    const next = r.offset + r.content.length;
    return cut(text) + (r.eof ? "" : `\n[ctxguard_recall: more bytes; read on with offset=${next}]`);
  }
  if (given[0] === "query") {
    if (typeof a.query !== "string" || !a.query) throw new Error("query must be a non-empty string");
    const r: context.SearchHistoryResponse = await client.searchHistory({
      sessionId,
      query: a.query,
      regex: a.regex === true,
      ignoreCase: true,
      pageSize: 20,
    });
    const lines = r.matches.map(
      (m) => `history position ${m.position} (${ROLES[m.role] ?? "?"}, ${m.partKind}): ${m.snippet}`,
    );
    if (!lines.length) lines.push("no match in the saved history");
    if (r.nextPageToken) lines.push("[more matches: narrow the query]");
    return cut(lines.join("\n"));
  }
  const first = nonNegative(a, "from_position", 0);
  const last = nonNegative(a, "to_position", first);
  if (last < first) throw new Error("to_position must not be before from_position");
  const r: context.GetHistoryResponse = await client.getHistory({
    sessionId,
    fromPosition: first,
    pageSize: Math.min(last - first + 1, RANGE_MAX),
  });
  const msgs = r.conversation?.messages?.messages ?? [];
  const lines = msgs.map((m, i) => {
    const body = m.parts.map(partText).join("\n");
    return `[history ${r.entries[i]?.position ?? first + i}] ${ROLES[m.role] ?? "?"}: ${body}`;
  });
  if (!lines.length) lines.push(`no messages there (the history has ${r.totalMessages})`);
  return cut(lines.join("\n\n"));
}

/** Runs one ctxguard_recall call; errors come back as text for the model. */
export async function recall(client: Client, sessionId: string, args: string | Record<string, unknown>): Promise<string> {
  try {
    return await runOne(client, sessionId, args);
  } catch (e) {
    if (e instanceof CtxguardError || e instanceof Error) return `ctxguard_recall: ${e.message}`;
    throw e;
  }
}
