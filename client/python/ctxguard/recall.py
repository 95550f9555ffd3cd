"""The ctxguard_recall tool: lets an agent read back what Compress took out of its context.

Compress leaves a pointer wherever it reduced something: "[trimmed: history 12]",
"[ctxguard summary of messages 3-41 (session history positions; ...)]", a compacted tool
result's "the whole result: history 12", an offloaded one's artifact id. Give the model
`recall_tool()` among its tools; when it calls `ctxguard_recall`, answer with
`client.recall(session_id, arguments)` (or `run(client, session_id, arguments)`), which maps
the call onto GetHistory, GetArtifact or SearchHistory and returns text for the tool result.

    tools = [ctxguard.recall_tool("openai")]
    ...
    for call in reply.choices[0].message.tool_calls or []:
        if call.function.name == ctxguard.RECALL_TOOL_NAME:
            text = client.recall(session_id, call.function.arguments)
"""

import json
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from ._stubs import common_pb2, context_pb2
from .errors import CtxguardError

RECALL_TOOL_NAME = "ctxguard_recall"

RECALL_DESCRIPTION = (
    "Read back what context compression removed or shortened in this conversation. Use it "
    "when a message says [trimmed: history N], [ctxguard summary of messages A-B ...], "
    "'the whole result: history N' or names an artifact (art_...), or when you need "
    "something said earlier that is no longer in view. Give exactly one of: from_position "
    "(with to_position for a range) to read original messages; artifact_id to read an "
    "offloaded tool result; query to search the whole saved history.")

RECALL_PARAMETERS: Dict[str, Any] = {
    "type": "object",
    "properties": {
        "from_position": {
            "type": "integer", "minimum": 0,
            "description": "First history position to read (the N of 'history N', the A of "
                           "'messages A-B')."},
        "to_position": {
            "type": "integer", "minimum": 0,
            "description": "Last position to read, inclusive (the B of 'messages A-B'); at "
                           "most 50 messages after from_position. Default: from_position."},
        "artifact_id": {
            "type": "string",
            "description": "An offloaded tool result's id, as the preview names it."},
        "offset": {
            "type": "integer", "minimum": 0,
            "description": "With artifact_id: first byte to read. Default 0."},
        "query": {
            "type": "string", "minLength": 1, "maxLength": 1000,
            "description": "Text to search the saved history for (case-insensitive)."},
        "regex": {
            "type": "boolean",
            "description": "With query: it is a POSIX extended regular expression."},
    },
    "additionalProperties": False,
}

RANGE_MAX = 50
TEXT_MAX = 20000  # characters of tool result returned


def recall_tool(format: str = "openai") -> Dict[str, Any]:
    """The tool definition: "openai" (chat completions), "anthropic" (messages API),
    "responses" (OpenAI Responses API), "gemini" (a function declaration, to put in
    tools=[{"functionDeclarations": [...]}]) or "schema" (name, description, parameters)."""
    if format == "openai":
        return {"type": "function", "function": {"name": RECALL_TOOL_NAME,
                                                 "description": RECALL_DESCRIPTION,
                                                 "parameters": RECALL_PARAMETERS}}
    if format == "anthropic":
        return {"name": RECALL_TOOL_NAME, "description": RECALL_DESCRIPTION,
                "input_schema": RECALL_PARAMETERS}
    if format == "responses":
        return {"type": "function", "name": RECALL_TOOL_NAME,
                "description": RECALL_DESCRIPTION, "parameters": RECALL_PARAMETERS}
    if format == "gemini":
        return {"name": RECALL_TOOL_NAME, "description": RECALL_DESCRIPTION,
                "parametersJsonSchema": RECALL_PARAMETERS}
    if format == "schema":
        return {"name": RECALL_TOOL_NAME, "description": RECALL_DESCRIPTION,
                "parameters": RECALL_PARAMETERS}
    raise ValueError(f"format {format!r}: one of openai, anthropic, responses, gemini, schema")


class _Bad(ValueError):
    pass


def _int(args: Mapping[str, Any], key: str, default: int) -> int:
    v = args.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise _Bad(f"{key} must be a non-negative integer")
    return v


def plan(session_id: str, arguments: Union[str, Mapping[str, Any]]) -> Tuple[str, Any]:
    """The RPC and request one ctxguard_recall call maps to; ValueError naming the argument
    when the call is not valid."""
    if isinstance(arguments, (str, bytes)):
        try:
            arguments = json.loads(arguments or "{}")
        except ValueError as e:
            raise _Bad(f"arguments are not JSON: {e}") from None
    if not isinstance(arguments, Mapping):
        raise _Bad("arguments must be a JSON object")
    unknown = set(arguments) - set(RECALL_PARAMETERS["properties"])
    if unknown:
        raise _Bad(f"unknown argument {sorted(unknown)[0]!r}")
    given = [k for k in ("from_position", "artifact_id", "query") if k in arguments]
    if len(given) != 1:
        raise _Bad("give exactly one of from_position, artifact_id, query")
    if given[0] == "artifact_id":
        aid = arguments["artifact_id"]
        if not isinstance(aid, str) or not aid:
            raise _Bad("artifact_id must be a non-empty string")
        return "GetArtifact", context_pb2.GetArtifactRequest(
            artifact_id=aid, offset=_int(arguments, "offset", 0), length=TEXT_MAX * 4)
    if given[0] == "query":
        q = arguments["query"]
        if not isinstance(q, str) or not q:
            raise _Bad("query must be a non-empty string")
        return "SearchHistory", context_pb2.SearchHistoryRequest(
            session_id=session_id, query=q, regex=bool(arguments.get("regex", False)),
            ignore_case=True, page_size=20)
    first = _int(arguments, "from_position", 0)
    last = _int(arguments, "to_position", first)
    if last < first:
        raise _Bad("to_position must not be before from_position")
    return "GetHistory", context_pb2.GetHistoryRequest(
        session_id=session_id, from_position=first,
        page_size=min(last - first + 1, RANGE_MAX))


_ROLES = {common_pb2.ROLE_SYSTEM: "system", common_pb2.ROLE_USER: "user",
          common_pb2.ROLE_ASSISTANT: "assistant", common_pb2.ROLE_TOOL: "tool",
          common_pb2.ROLE_DEVELOPER: "developer"}


def _part_text(p: Any) -> str:
    kind = p.WhichOneof("kind")
    if kind == "text":
        return p.text
    if kind == "tool_call":
        return f"[tool call {p.tool_call.name} {p.tool_call.id}] {p.tool_call.arguments_json}"
    if kind == "tool_result":
        return f"[tool result {p.tool_result.tool_call_id}] {p.tool_result.content}"
    if kind == "reasoning":
        return f"[reasoning] {p.reasoning.text}"
    return f"[{kind}]"


def _cut(text: str) -> str:
    if len(text) <= TEXT_MAX:
        return text
    return text[:TEXT_MAX] + f"\n[ctxguard_recall: {len(text) - TEXT_MAX} more characters]"


def render(method: str, resp: Any) -> str:
    """The tool result's text for an answer of `method`."""
    if method == "GetArtifact":
        more = resp.artifact.size_bytes - resp.offset - len(resp.content)
        tail = "" if resp.eof else (f"\n[ctxguard_recall: {more} more bytes; read on with "
                                    f"offset={resp.offset + len(resp.content)}]")
        return _cut(resp.content.decode("utf-8", "replace")) + tail
    if method == "SearchHistory":
        lines: List[str] = [f"history position {m.position} ({_ROLES.get(m.role, '?')}, "
                            f"{m.part_kind}): {m.snippet}" for m in resp.matches]
        if not lines:
            lines.append("no match in the saved history")
        if resp.next_page_token:
            lines.append("[more matches: narrow the query]")
        return _cut("\n".join(lines))
    msgs = resp.conversation.messages.messages
    lines = []
    for entry, m in zip(resp.entries, msgs):
        body = "\n".join(_part_text(p) for p in m.parts)
        lines.append(f"[history {entry.position}] {_ROLES.get(m.role, '?')}: {body}")
    if not lines:
        lines.append(f"no messages there (the history has {resp.total_messages})")
    return _cut("\n\n".join(lines))


def run(client: Any, session_id: str, arguments: Union[str, Mapping[str, Any]], *,
        timeout: Optional[float] = None) -> str:
    """Runs one ctxguard_recall call with a Client; errors come back as text for the model."""
    try:
        method, req = plan(session_id, arguments)
        return render(method, client.call(method, req, timeout=timeout))
    except (ValueError, CtxguardError) as e:
        return f"ctxguard_recall: {e}"


async def run_async(client: Any, session_id: str, arguments: Union[str, Mapping[str, Any]], *,
                    timeout: Optional[float] = None) -> str:
    """run() with an AsyncClient."""
    try:
        method, req = plan(session_id, arguments)
        return render(method, await client.call(method, req, timeout=timeout))
    except (ValueError, CtxguardError) as e:
        return f"ctxguard_recall: {e}"
