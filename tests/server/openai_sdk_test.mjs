// greta-vk serve driven by OpenAI's official Node SDK (npm package `openai`, pinned in package.json and installed by
// scripts/setup.sh: npm ci --prefix tests/server): chat completion, streamed chat, completions, models, an API key,
// and the SDK's error class for a bad request. Registered in CTest (label "server").
//   node tests/server/openai_sdk_test.mjs GRETA_VK MODEL
// Prints "PASS" and exits 0; "FAIL: ..." with the server's log and exits 1; exits 77 (CTest: skipped) when the SDK is
// not installed.
import { spawn } from "node:child_process";
import assert from "node:assert/strict";

const [bin, model] = process.argv.slice(2);
let OpenAI;
try {
  ({ default: OpenAI } = await import("openai"));
} catch (e) {
  console.log(`SKIP: the openai package is not installed (npm ci --prefix tests/server): ${e.message}`);
  process.exit(77);
}

const key = "sdk-test-key";
const server = spawn(bin, ["serve", model, "--port", "0", "--backend", "cpu", "--api-key", key],
                     { stdio: ["ignore", "ignore", "pipe"] });
let log = "";
const exited = new Promise((resolve) => server.on("exit", (code, signal) => resolve({ code, signal })));
const port = await new Promise((resolve, reject) => {
  const timer = setTimeout(() => reject(new Error("no 'listening on' line within 60 s")), 60000);
  server.stderr.on("data", (chunk) => {
    log += chunk;
    const m = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(log);
    if (m) {
      clearTimeout(timer);
      resolve(Number(m[1]));
    }
  });
  server.on("exit", () => reject(new Error("the server exited before it listened")));
});

function fail(message) {
  console.log(`FAIL: ${message}\n--- server log:\n${log.split("\n").slice(-30).join("\n")}`);
  server.kill("SIGKILL");
  process.exit(1);
}

try {
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; ; ++i) {
    const ok = await fetch(`${base}/health`).then((r) => r.status === 200, () => false);
    if (ok) break;
    if (i > 600) throw new Error("/health was not 200 within 60 s");
    await new Promise((r) => setTimeout(r, 100));
  }
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0, timeout: 60000 });

  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), ["stories260K"]);

  // chat completion
  const chat = await client.chat.completions.create({
    model: "stories260K",
    messages: [{ role: "system", content: "You tell stories." }, { role: "user", content: "Tell me a story." }],
    max_tokens: 16,
    temperature: 0,
  });
  assert.equal(chat.object, "chat.completion");
  assert.equal(chat.choices.length, 1);
  assert.equal(chat.choices[0].message.role, "assistant");
  assert.ok(chat.choices[0].message.content.length > 0, "empty chat reply");
  assert.ok(["stop", "length"].includes(chat.choices[0].finish_reason));
  assert.equal(chat.usage.total_tokens, chat.usage.prompt_tokens + chat.usage.completion_tokens);

  // streamed chat: the same text at temperature 0, usage in the last chunk
  const stream = await client.chat.completions.create({
    model: "stories260K",
    messages: [{ role: "system", content: "You tell stories." }, { role: "user", content: "Tell me a story." }],
    max_tokens: 16,
    temperature: 0,
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = "", finish = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    ++chunks;
    assert.equal(chunk.object, "chat.completion.chunk");
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta.content ?? "";
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(chunks >= 3, `only ${chunks} chunks`);
  assert.equal(text, chat.choices[0].message.content);
  assert.equal(finish, chat.choices[0].finish_reason);
  assert.equal(usage?.completion_tokens, chat.usage.completion_tokens);

  // the SDK's stream helper accumulates the same message
  const runner = client.chat.completions.stream({
    model: "stories260K",
    messages: [{ role: "system", content: "You tell stories." }, { role: "user", content: "Tell me a story." }],
    max_tokens: 16,
    temperature: 0,
  });
  const final = await runner.finalChatCompletion();
  assert.equal(final.choices[0].message.content, chat.choices[0].message.content);

  // completions (legacy), with logprobs
  const completion = await client.completions.create({
    model: "stories260K", prompt: "Once upon a time", max_tokens: 10, temperature: 0, logprobs: 2,
  });
  assert.equal(completion.object, "text_completion");
  assert.equal(completion.choices[0].text, ", there was a little girl named Lily");
  assert.equal(completion.usage.prompt_tokens, 5);
  assert.equal(completion.usage.completion_tokens, 10);
  assert.equal(completion.choices[0].logprobs.tokens.join(""), completion.choices[0].text);

  // errors arrive as the SDK's typed errors
  await assert.rejects(
    client.chat.completions.create({ model: "stories260K", messages: [], max_tokens: 4 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === "messages");
  await assert.rejects(
    client.chat.completions.create({ model: "gpt-4o", messages: [{ role: "user", content: "Hi" }] }),
    (e) => e instanceof OpenAI.NotFoundError && e.code === "model_not_found");
  const wrong = new OpenAI({ baseURL: `${base}/v1`, apiKey: "wrong", maxRetries: 0 });
  await assert.rejects(wrong.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
} catch (e) {
  fail(e.stack ?? String(e));
}

server.kill("SIGTERM");
const { code, signal } = await Promise.race([
  exited, new Promise((r) => setTimeout(() => r({ code: "timeout" }), 30000)),
]);
if (code !== 0) fail(`the server exited with ${code} (${signal}) after SIGTERM`);
console.log("PASS");
process.exit(0);  // the race's timer would keep the process alive
