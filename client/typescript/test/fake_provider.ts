// A model endpoint on 127.0.0.1:0 (node:http) that answers like OpenAI's Chat Completions
// (POST /v1/chat/completions) and Anthropic's Messages (POST /v1/messages), plain JSON or
// SSE streams, with usage that includes cache tokens. Each answer's usage is distinct
// (taken from a counter) so that a test can check exactly what was committed.
// Model names steer failures: "fail-400" answers 400; "fail-midstream" cuts the stream.
// "call-recall" answers (plain JSON) a call of the ctxguard_recall tool when the request
// offers it, searching for the last user message's text.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

export interface OpenAIUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
  completion_tokens_details: { reasoning_tokens: number };
}

export interface AnthropicUsage {
  input_tokens: number;
  output_tokens: number;
  cache_read_input_tokens: number;
  cache_creation_input_tokens: number;
}

export interface Seen {
  path: string;
  body: Record<string, unknown>;
}

export class FakeProvider {
  private server: Server | undefined;
  port = 0;
  /** Every request, in order. */
  readonly seen: Seen[] = [];
  /** The usage of the last answer, per API. */
  lastOpenAI: OpenAIUsage | undefined;
  lastAnthropic: AnthropicUsage | undefined;
  private n = 0;

  get openaiBaseURL(): string {
    return `http://127.0.0.1:${this.port}/v1`;
  }
  get anthropicBaseURL(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      let body = "";
      req.setEncoding("utf8");
      req.on("data", (c: string) => (body += c));
      req.on("end", () => {
        try {
          this.handle(req, res, body ? (JSON.parse(body) as Record<string, unknown>) : {});
        } catch (err) {
          res.writeHead(500, { "content-type": "application/json" });
          res.end(JSON.stringify({ error: { message: String(err) } }));
        }
      });
    });
    await new Promise<void>((resolve) => this.server!.listen(0, "127.0.0.1", resolve));
    this.port = (this.server.address() as AddressInfo).port;
    return this;
  }

  async close(): Promise<void> {
    if (!this.server) return;
    this.server.closeAllConnections?.();
    await new Promise<void>((resolve) => this.server!.close(() => resolve()));
  }

  private nextOpenAI(): OpenAIUsage {
    this.n++;
    const prompt = 1200 + this.n * 7;
    const cached = 1024;
    const completion = 40 + this.n;
    const u = {
      prompt_tokens: prompt,
      completion_tokens: completion,
      total_tokens: prompt + completion,
      prompt_tokens_details: { cached_tokens: cached },
      completion_tokens_details: { reasoning_tokens: 0 },
    };
    this.lastOpenAI = u;
    return u;
  }

  private nextAnthropic(): AnthropicUsage {
    this.n++;
    const u = { input_tokens: 300 + this.n, output_tokens: 50 + this.n * 3, cache_read_input_tokens: 2000 + this.n, cache_creation_input_tokens: 512 };
    this.lastAnthropic = u;
    return u;
  }

  private handle(req: IncomingMessage, res: ServerResponse, body: Record<string, unknown>): void {
    this.seen.push({ path: req.url ?? "", body });
    const model = String(body["model"] ?? "");
    if (model === "fail-400") {
      res.writeHead(400, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { message: "bad request (fake provider)", type: "invalid_request_error" } }));
      return;
    }
    if (req.method === "POST" && req.url === "/v1/chat/completions") return this.openai(res, body, model);
    if (req.method === "POST" && req.url === "/v1/messages") return this.anthropic(res, body, model);
    res.writeHead(404, { "content-type": "application/json" });
    res.end(JSON.stringify({ error: { message: `no route ${req.method} ${req.url}` } }));
  }

  /** A tool call of ctxguard_recall (when offered) with {"query": <the last user text>}. */
  private recallCall(body: Record<string, unknown>): { message: Record<string, unknown>; finish: string } {
    const tools = (body["tools"] ?? []) as { function?: { name?: string } }[];
    const messages = (body["messages"] ?? []) as { role: string; content: unknown }[];
    const last = [...messages].reverse().find((m) => m.role === "user");
    if (!tools.some((t) => t.function?.name === "ctxguard_recall"))
      return { message: { role: "assistant", content: "no recall tool offered", refusal: null }, finish: "stop" };
    const call = { name: "ctxguard_recall", arguments: JSON.stringify({ query: String(last?.content ?? "") }) };
    return {
      message: { role: "assistant", content: null, refusal: null, tool_calls: [{ id: "call_recall_1", type: "function", function: call }] },
      finish: "tool_calls",
    };
  }

  private openai(res: ServerResponse, body: Record<string, unknown>, model: string): void {
    const id = `chatcmpl-${this.n + 1}`;
    const created = Math.floor(Date.now() / 1000);
    const text = "Hello from the fake provider.";
    if (!body["stream"]) {
      const usage = this.nextOpenAI();
      const { message, finish } =
        model === "call-recall"
          ? this.recallCall(body)
          : { message: { role: "assistant", content: text, refusal: null }, finish: "stop" };
      res.writeHead(200, { "content-type": "application/json" });
      res.end(
        JSON.stringify({
          id,
          object: "chat.completion",
          created,
          model,
          choices: [{ index: 0, message, finish_reason: finish, logprobs: null }],
          usage,
        }),
      );
      return;
    }
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
    const send = (o: unknown): boolean => res.write(`data: ${JSON.stringify(o)}\n\n`);
    const chunk = (delta: Record<string, unknown>, finish: string | null) => ({
      id,
      object: "chat.completion.chunk",
      created,
      model,
      choices: [{ index: 0, delta, finish_reason: finish, logprobs: null }],
    });
    send(chunk({ role: "assistant", content: "" }, null));
    const words = text.split(" ");
    for (const [i, w] of words.entries()) {
      if (model === "fail-midstream" && i === 1) {
        // Cut the connection once the first chunks are on the wire (headers included).
        res.write(`data: ${JSON.stringify(chunk({ content: " " + w }, null))}\n\n`, () => res.socket?.destroy());
        return;
      }
      send(chunk({ content: (i ? " " : "") + w }, null));
    }
    send(chunk({}, "stop"));
    const opts = body["stream_options"] as { include_usage?: boolean } | undefined;
    if (opts?.include_usage) {
      send({ id, object: "chat.completion.chunk", created, model, choices: [], usage: this.nextOpenAI() });
    }
    res.end("data: [DONE]\n\n");
  }

  private anthropic(res: ServerResponse, body: Record<string, unknown>, model: string): void {
    const id = `msg_${this.n + 1}`;
    const text = "Hello from the fake Anthropic.";
    const usage = this.nextAnthropic();
    if (!body["stream"]) {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(
        JSON.stringify({
          id,
          type: "message",
          role: "assistant",
          model,
          content: [{ type: "text", text }],
          stop_reason: "end_turn",
          stop_sequence: null,
          usage,
        }),
      );
      return;
    }
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
    const send = (event: string, o: unknown): boolean => res.write(`event: ${event}\ndata: ${JSON.stringify(o)}\n\n`);
    send("message_start", {
      type: "message_start",
      message: {
        id,
        type: "message",
        role: "assistant",
        model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: { ...usage, output_tokens: 1 },
      },
    });
    send("content_block_start", { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } });
    const words = text.split(" ");
    for (const [i, w] of words.entries()) {
      const delta = { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: (i ? " " : "") + w } };
      if (model === "fail-midstream" && i === 1) {
        res.write(`event: content_block_delta\ndata: ${JSON.stringify(delta)}\n\n`, () => res.socket?.destroy());
        return;
      }
      send("content_block_delta", delta);
    }
    send("content_block_stop", { type: "content_block_stop", index: 0 });
    send("message_delta", { type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: usage.output_tokens } });
    send("message_stop", { type: "message_stop" });
    res.end();
  }
}
