// The real `openai`, `@anthropic-ai/sdk` and `@langchain/openai` packages against a local
// fake provider (node:http, plain and SSE), charged through a real ctxguard server:
// wrapOpenAI, wrapAnthropic, the LangChain handler, countTokens and compressMessages.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import Anthropic from "@anthropic-ai/sdk";
import { HumanMessage, SystemMessage } from "@langchain/core/messages";
import { ChatOpenAI } from "@langchain/openai";
import { Tiktoken } from "js-tiktoken/lite";
import o200k_base from "js-tiktoken/ranks/o200k_base";
import OpenAI from "openai";

import {
  BudgetExhausted,
  Client,
  conversation,
  CtxguardCallbackHandler,
  RECALL_TOOL_NAME,
  recall,
  recallTool,
  TokenCountMethod,
  TokenEncoding,
  wrapAnthropic,
  wrapOpenAI,
  type GuardHandle,
} from "../src/index.js";
import { FakeProvider } from "./fake_provider.js";
import { Server, sid } from "./harness.js";

let server: Server;
let client: Client;
let fake: FakeProvider;

before(async () => {
  [server, fake] = await Promise.all([new Server().start(), new FakeProvider().start()]);
  ({ client } = await server.tenantClient());
});

after(async () => {
  client?.close();
  await Promise.all([server?.close(), fake?.close()]);
});

async function newScope(limitTokens = 1_000_000): Promise<string> {
  const s = sid();
  await client.setBudget({ scope: s, settings: { limitTokens } });
  return s;
}

async function usageOf(scope: string) {
  return (await client.getUsage({ scope })).root!;
}

const openai = () => new OpenAI({ apiKey: "sk-test", baseURL: fake.openaiBaseURL, maxRetries: 0 });
const anthropic = () => new Anthropic({ apiKey: "sk-ant-test", baseURL: fake.anthropicBaseURL, maxRetries: 0 });

const MESSAGES = [
  { role: "system" as const, content: "You are terse." },
  { role: "user" as const, content: "Say hello, and tell me about prompt caching in two sentences." },
];

describe("wrapOpenAI", () => {
  test("chat.completions.create commits exactly the usage the provider reported (cached as cache reads)", async () => {
    const s = await newScope();
    const settled: GuardHandle[] = [];
    const ai = wrapOpenAI(openai(), { client, scope: s, onSettled: ({ handle }) => settled.push(handle) });
    const res = await ai.chat.completions.create({ model: "gpt-4o", messages: MESSAGES, max_tokens: 300 });
    assert.equal(res.choices[0]!.message.content, "Hello from the fake provider.");
    const p = fake.lastOpenAI!;
    const u = await usageOf(s);
    assert.equal(u.usage!.inputTokens, p.prompt_tokens - p.prompt_tokens_details.cached_tokens);
    assert.equal(u.usage!.cacheReadTokens, p.prompt_tokens_details.cached_tokens);
    assert.equal(u.usage!.outputTokens, p.completion_tokens);
    assert.equal(u.usedTokens, p.prompt_tokens + p.completion_tokens);
    assert.equal(u.reservedTokens, 0);
    // The estimate was the server's exact count of the prompt plus max_tokens.
    const counted = await client.countTokens(MESSAGES, { model: "gpt-4o" });
    assert.equal(settled[0]!.reservation.tokens, counted.totalTokens + 300);
    assert.equal(settled[0]!.model, "gpt-4o");
  });

  test("stream: include_usage is sent, chunks pass through, the final usage chunk is committed", async () => {
    const s = await newScope();
    const ai = wrapOpenAI(openai(), { client, scope: s });
    const before = fake.seen.length;
    const stream = await ai.chat.completions.create({ model: "gpt-4o", messages: MESSAGES, stream: true });
    let text = "";
    let chunks = 0;
    for await (const chunk of stream) {
      chunks++;
      assert.ok(chunk.choices.length > 0, "the usage-only chunk is not yielded when the caller did not ask for it");
      text += chunk.choices[0]!.delta.content ?? "";
    }
    assert.equal(text, "Hello from the fake provider.");
    assert.ok(chunks >= 5);
    assert.deepEqual(fake.seen[before]!.body["stream_options"], { include_usage: true });
    const p = fake.lastOpenAI!;
    const u = await usageOf(s);
    assert.equal(u.usage!.inputTokens, p.prompt_tokens - p.prompt_tokens_details.cached_tokens);
    assert.equal(u.usage!.cacheReadTokens, 1024);
    assert.equal(u.usage!.outputTokens, p.completion_tokens);
    assert.equal(u.reservedTokens, 0);
  });

  test("stream: a caller asking include_usage gets the usage chunk too", async () => {
    const s = await newScope();
    const ai = wrapOpenAI(openai(), { client, scope: s });
    const stream = await ai.chat.completions.create({
      model: "gpt-4o",
      messages: MESSAGES,
      stream: true,
      stream_options: { include_usage: true },
    });
    let usageChunks = 0;
    for await (const chunk of stream) if (chunk.usage) usageChunks++;
    assert.equal(usageChunks, 1);
    assert.equal((await usageOf(s)).usedTokens, fake.lastOpenAI!.total_tokens);
  });

  test("a failing call releases the reservation and rethrows the SDK's error", async () => {
    const s = await newScope();
    const ai = wrapOpenAI(openai(), { client, scope: s });
    await assert.rejects(ai.chat.completions.create({ model: "fail-400", messages: MESSAGES }), (err) => err instanceof OpenAI.APIError && err.status === 400);
    const broken = await ai.chat.completions.create({ model: "fail-midstream", messages: MESSAGES, stream: true });
    let got = 0;
    await assert.rejects(async () => {
      for await (const _ of broken) got++;
    });
    assert.ok(got >= 1, "chunks arrived before the connection was cut");
    const u = await usageOf(s);
    assert.equal(u.reservedTokens, 0);
    assert.equal(u.usedTokens, 0);
    assert.equal(u.openReservations, 0);
  });

  test("BudgetExhausted before the provider is called", async () => {
    const s = await newScope(50);
    const ai = wrapOpenAI(openai(), { client, scope: s });
    const before = fake.seen.length;
    await assert.rejects(ai.chat.completions.create({ model: "gpt-4o", messages: MESSAGES }), BudgetExhausted);
    assert.equal(fake.seen.length, before, "no request reached the provider");
  });

  test("a given estimator and a scope chosen per call", async () => {
    const s = await newScope();
    const settled: GuardHandle[] = [];
    const ai = wrapOpenAI(openai(), {
      client,
      scope: (params) => `${s}`.concat(params["model"] === "gpt-4o" ? "" : "-other"),
      estimate: (params) => 700 + (params["messages"] as unknown[]).length,
      delay: "client",
      onSettled: ({ handle }) => settled.push(handle),
    });
    await ai.chat.completions.create({ model: "gpt-4o", messages: MESSAGES });
    assert.equal(settled[0]!.reservation.tokens, 702);
    assert.equal(settled[0]!.scope, s);
    assert.equal((await usageOf(s)).usedTokens, fake.lastOpenAI!.total_tokens);
  });

  test("everything else on the client is the SDK's own", () => {
    const raw = openai();
    const ai = wrapOpenAI(raw, { client, scope: "x" });
    assert.equal(ai.baseURL, raw.baseURL);
    assert.equal(typeof ai.embeddings.create, "function");
  });
});

describe("wrapAnthropic", () => {
  test("messages.create commits input, output, cache reads and cache writes", async () => {
    const s = await newScope();
    const ai = wrapAnthropic(anthropic(), { client, scope: s });
    const msg = await ai.messages.create({
      model: "claude-sonnet-4-5",
      max_tokens: 500,
      system: "You are terse.",
      messages: [{ role: "user", content: "Say hello." }],
    });
    assert.equal(msg.content[0]!.type, "text");
    const p = fake.lastAnthropic!;
    const u = await usageOf(s);
    assert.deepEqual(
      [u.usage!.inputTokens, u.usage!.outputTokens, u.usage!.cacheReadTokens, u.usage!.cacheWriteTokens],
      [p.input_tokens, p.output_tokens, p.cache_read_input_tokens, p.cache_creation_input_tokens],
    );
    assert.equal(u.reservedTokens, 0);
  });

  test("stream: message_start usage updated by message_delta's output count", async () => {
    const s = await newScope();
    const ai = wrapAnthropic(anthropic(), { client, scope: s });
    const stream = await ai.messages.create({
      model: "claude-sonnet-4-5",
      max_tokens: 500,
      messages: [{ role: "user", content: "Say hello." }],
      stream: true,
    });
    const types: string[] = [];
    let text = "";
    for await (const ev of stream) {
      types.push(ev.type);
      if (ev.type === "content_block_delta" && ev.delta.type === "text_delta") text += ev.delta.text;
    }
    assert.equal(text, "Hello from the fake Anthropic.");
    assert.equal(types[0], "message_start");
    assert.equal(types.at(-1), "message_stop");
    const p = fake.lastAnthropic!;
    const u = await usageOf(s);
    assert.deepEqual(
      [u.usage!.inputTokens, u.usage!.outputTokens, u.usage!.cacheReadTokens, u.usage!.cacheWriteTokens],
      [p.input_tokens, p.output_tokens, p.cache_read_input_tokens, p.cache_creation_input_tokens],
    );
  });

  test("a failing call is released; a stream cut after message_start commits the usage it reported", async () => {
    const s = await newScope();
    const ai = wrapAnthropic(anthropic(), { client, scope: s });
    await assert.rejects(ai.messages.create({ model: "fail-400", max_tokens: 10, messages: [{ role: "user", content: "x" }] }));
    const broken = await ai.messages.create({ model: "fail-midstream", max_tokens: 10, messages: [{ role: "user", content: "x" }], stream: true });
    let got = 0;
    await assert.rejects(async () => {
      for await (const _ of broken) got++;
    });
    assert.ok(got >= 1, "events arrived before the connection was cut");
    const u = await usageOf(s);
    // The cut stream had reported its prompt (message_start): that much was spent and is
    // committed; nothing stays reserved.
    const p = fake.lastAnthropic!;
    assert.equal(u.reservedTokens, 0);
    assert.equal(u.usedTokens, p.input_tokens + p.cache_read_input_tokens + p.cache_creation_input_tokens + 1);
  });
});

describe("LangChain handler", () => {
  const chat = (model = "gpt-4o") =>
    new ChatOpenAI({ model, apiKey: "sk-test", configuration: { baseURL: fake.openaiBaseURL }, maxRetries: 0 });

  test("a ChatOpenAI run is reserved at start and committed from its usage_metadata", async () => {
    const s = await newScope();
    const handler = new CtxguardCallbackHandler({ client, scope: s });
    const reply = await chat().invoke([new SystemMessage("You are terse."), new HumanMessage("Say hello.")], { callbacks: [handler] });
    assert.equal(reply.content, "Hello from the fake provider.");
    const p = fake.lastOpenAI!;
    const u = await usageOf(s);
    assert.equal(u.usage!.inputTokens, p.prompt_tokens - p.prompt_tokens_details.cached_tokens);
    assert.equal(u.usage!.cacheReadTokens, p.prompt_tokens_details.cached_tokens);
    assert.equal(u.usage!.outputTokens, p.completion_tokens);
    assert.equal(u.reservedTokens, 0);
    assert.equal(handler.openRuns, 0);
  });

  test("a failing run is released; an exhausted budget stops the run before the provider", async () => {
    const s = await newScope();
    const handler = new CtxguardCallbackHandler({ client, scope: s });
    await assert.rejects(chat("fail-400").invoke([new HumanMessage("x")], { callbacks: [handler] }));
    const u = await usageOf(s);
    assert.equal(u.reservedTokens + u.usedTokens, 0);
    assert.equal(handler.openRuns, 0);

    const small = await newScope(20);
    const before = fake.seen.length;
    await assert.rejects(
      chat().invoke([new HumanMessage("Say hello.")], { callbacks: [new CtxguardCallbackHandler({ client, scope: small })] }),
      BudgetExhausted,
    );
    assert.equal(fake.seen.length, before);
  });
});

describe("context", () => {
  test("countTokens matches an exact o200k count of the chat for gpt-4o", async () => {
    const messages = [
      { role: "system", content: "You are a careful assistant. Answer in English." },
      { role: "user", content: "Größe? 東京 — naïve café, emoji 🎉, code `x += 1;` and numbers 1234567." },
      { role: "assistant", content: "Here is the answer:\n\n- one\n- two" },
    ];
    const res = await client.countTokens(messages, { model: "gpt-4o" });
    assert.equal(res.method, TokenCountMethod.TOKEN_COUNT_METHOD_EXACT);
    assert.equal(res.encoding, TokenEncoding.TOKEN_ENCODING_O200K_BASE);
    // OpenAI's chat accounting: 3 per message + role + content, 3 for the reply priming.
    const enc = new Tiktoken(o200k_base);
    const expected = messages.reduce((n, m) => n + 3 + enc.encode(m.role).length + enc.encode(m.content).length, 3);
    assert.equal(res.totalTokens, expected);
    assert.equal(res.messageTokens.length, 3);
  });

  test("countTokens takes Anthropic messages and tools", async () => {
    const res = await client.countTokens([{ role: "user", content: [{ type: "text", text: "What is the weather in Paris?" }] }], {
      format: "anthropic",
      model: "claude-sonnet-4-5",
      system: "Be brief.",
      tools: [{ name: "get_weather", description: "Weather for a city", input_schema: { type: "object", properties: { city: { type: "string" } } } }],
    });
    assert.ok(res.totalTokens > 0);
    assert.ok(res.breakdown!.toolDefinitionTokens > 0, "the tool was counted");
    // Estimated (calibrated once a commit with a provider count has taught the tenant's factor).
    assert.ok(
      [TokenCountMethod.TOKEN_COUNT_METHOD_ESTIMATED, TokenCountMethod.TOKEN_COUNT_METHOD_CALIBRATED].includes(res.method),
      `method ${res.method}`,
    );
    assert.ok(res.errorBoundTokens > 0);
  });

  test("compressMessages returns OpenAI messages and the report", async () => {
    const messages: { role: string; content: string }[] = [{ role: "system", content: "You are a helpful assistant." }];
    for (let i = 0; i < 40; i++) {
      messages.push({ role: "user", content: `Question ${i}: ` + "please explain the details of step ".repeat(12) + i });
      messages.push({ role: "assistant", content: `Answer ${i}: ` + "the step works as follows and then continues ".repeat(12) });
    }
    const r = await client.compressMessages(messages, { model: "gpt-4o", contextWindowTokens: 8_000, summarizer: 3 });
    assert.ok(r.report.triggered);
    assert.ok(r.report.tokensAfter < r.report.tokensBefore, `${r.report.tokensAfter} < ${r.report.tokensBefore}`);
    assert.ok(Array.isArray(r.messages));
    assert.equal(r.messages.length, r.report.messagesAfter);
    const out = r.messages as { role: string }[];
    assert.equal(out[0]!.role, "system");
    assert.ok(out.every((m) => ["system", "user", "assistant", "tool", "developer"].includes(m.role)));
    const recount = await client.countTokens(out, { model: "gpt-4o" });
    assert.equal(recount.totalTokens, r.report.tokensAfter);
  });

  test("compressMessages keeps the Anthropic format and the system prompt", async () => {
    const messages: { role: string; content: string }[] = [];
    for (let i = 0; i < 30; i++) {
      messages.push({ role: "user", content: `Step ${i}: ` + "describe the next part of the plan please ".repeat(10) });
      messages.push({ role: "assistant", content: `Part ${i}: ` + "the plan continues with this part ".repeat(10) });
    }
    const r = await client.compressMessages(messages, {
      format: "anthropic",
      system: "You plan things.",
      model: "claude-sonnet-4-5",
      contextWindowTokens: 6_000,
      summarizer: 3,
    });
    assert.ok(r.report.tokensAfter < r.report.tokensBefore);
    const conv = r.conversation as { system?: unknown; messages: { role: string }[] };
    assert.equal(conv.system, "You plan things.");
    assert.equal(conv.messages, r.messages);
    assert.equal(r.messages.length, r.report.messagesAfter - 1, "the system prompt is counted as a message by the report");
    assert.ok(conv.messages.every((m) => m.role === "user" || m.role === "assistant"));
  });
});

describe("the Responses and Gemini formats", () => {
  test("compressMessages keeps each format and its system prompt", async () => {
    const items: unknown[] = [];
    const contents: unknown[] = [];
    for (let i = 0; i < 30; i++) {
      const q = `Step ${i}: ` + "describe the next part of the plan please ".repeat(10);
      const a = `Part ${i}: ` + "the plan continues with this part ".repeat(10);
      items.push({ role: "user", content: q }, { role: "assistant", content: a });
      contents.push({ role: "user", parts: [{ text: q }] }, { role: "model", parts: [{ text: a }] });
    }
    const cases = [
      { format: "responses" as const, messages: items, key: "instructions", roles: ["user", "assistant"] },
      { format: "gemini" as const, messages: contents, key: "systemInstruction", roles: ["user", "model"] },
    ];
    for (const c of cases) {
      const r = await client.compressMessages(c.messages, {
        format: c.format,
        system: "You plan things.",
        model: "gpt-4o",
        contextWindowTokens: 6_000,
        summarizer: 3,
      });
      assert.ok(r.report.tokensAfter < r.report.tokensBefore, c.format);
      const conv = r.conversation as Record<string, unknown>;
      assert.ok(conv[c.key] !== undefined, `${c.format} keeps ${c.key}`);
      // The newest user text as it was (assistant text may be trimmed; the summary, a user
      // message, may share a message with it).
      const newest = JSON.stringify(JSON.stringify(c.messages[c.messages.length - 2]).match(/Step 29[^"]*/)![0]);
      assert.ok(JSON.stringify(r.messages).includes(newest), `${c.format}: the newest user text is kept`);
      assert.ok((r.messages as { role: string }[]).every((m) => c.roles.includes(m.role)), c.format);
      const recount = await client.countTokens(r.messages, { format: c.format, model: "gpt-4o", system: "You plan things." });
      assert.equal(recount.totalTokens, r.report.tokensAfter, c.format);
    }
  });

  test("conversation() writes each format's request body", () => {
    assert.deepEqual(conversation([{ role: "user", parts: [{ text: "hi" }] }], { format: "gemini", system: "sys" }), {
      geminiJson: JSON.stringify({ contents: [{ role: "user", parts: [{ text: "hi" }] }], systemInstruction: { parts: [{ text: "sys" }] } }),
    });
    assert.deepEqual(conversation([{ role: "user", content: "hi" }], { format: "responses", system: "sys" }), {
      responsesJson: JSON.stringify({ input: [{ role: "user", content: "hi" }], instructions: "sys" }),
    });
    assert.throws(() => conversation([], { format: "openai", system: "sys" }));
  });
});

describe("ctxguard_recall", () => {
  test("the real openai SDK sends the tool; the model's call is answered from the session's history", async () => {
    // A session whose history holds a fact the compressed context no longer shows verbatim.
    const sessionId = `recall-${sid()}`;
    const msgs: { role: "system" | "user" | "assistant"; content: string }[] = [{ role: "system", content: "You are a build assistant." }];
    for (let i = 0; i < 30; i++) {
      msgs.push({ role: "user", content: `Turn ${i}: the access code is Q${i * 41 + 3}X. ${"Keep going with the plan. ".repeat(30)}` });
      msgs.push({ role: "assistant", content: `Noted; the log is at /var/log/job${i}.log. ${"Working on it now. ".repeat(30)}` });
    }
    const r = await client.compressMessages(msgs, { model: "gpt-4o", contextWindowTokens: 4000, sessionId });
    const out = JSON.stringify(r.messages);
    const gone = [...Array(30).keys()].find((k) => !out.includes(`/var/log/job${k}.log`));
    assert.ok(gone !== undefined, "some fact was reduced away");
    const position = 2 + 2 * gone;
    assert.match(out, /\[trimmed: history \d+\]|\[ctxguard summary of messages \d+-\d+/);
    const oa = openai();
    const reply = await oa.chat.completions.create({
      model: "call-recall",
      messages: [...(r.messages as OpenAI.Chat.ChatCompletionMessageParam[]), { role: "user", content: `job${gone}.log` }],
      tools: [recallTool("openai") as unknown as OpenAI.Chat.ChatCompletionTool],
    });
    const sent = fake.seen.at(-1)!.body["tools"] as { function: { name: string; parameters: unknown } }[];
    const offered = sent[0]!;
    assert.equal(offered.function.name, RECALL_TOOL_NAME);
    assert.deepEqual(offered.function.parameters, (recallTool("schema") as { parameters: unknown }).parameters);
    const call = reply.choices[0]!.message.tool_calls?.[0];
    assert.ok(call && call.type === "function" && call.function.name === RECALL_TOOL_NAME);
    const found = await recall(client, sessionId, call.function.arguments);
    assert.ok(found.includes(`history position ${position} (assistant, text): `), found.slice(0, 300));
    assert.ok(found.includes(`/var/log/job${gone}.log`), found.slice(0, 300));
    // And the position the pointer names reads the original back.
    const original = await recall(client, sessionId, { from_position: position });
    assert.ok(original.includes(`Noted; the log is at /var/log/job${gone}.log.`), original.slice(0, 200));
    assert.match(await recall(client, sessionId, { from_position: 1, query: "x" }), /exactly one/);
  });
});
