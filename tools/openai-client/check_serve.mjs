// Drives a running `dqt serve` with OpenAI's own Node client (npm `openai`), as an application
// would: lists the models, asks for a completion and a chat answer, streams both, sends a chat
// as text parts, asks for a chat answer's logprobs and scores a batch of two prompts (echo with
// logprobs), and checks that a malformed request comes back as the client's APIError with a 4xx
// status.
//   npm install --prefix tools/openai-client && node tools/openai-client/check_serve.mjs http://127.0.0.1:8080/v1
import OpenAI from "openai";

const baseURL = process.argv[2] ?? "http://127.0.0.1:8080/v1";
const client = new OpenAI({ baseURL, apiKey: "unused" });
const fail = (message) => { console.error(`FAIL: ${message}`); process.exit(1); };

const models = await client.models.list();
const model = models.data[0]?.id ?? fail("no model listed");
console.log(`model: ${model}`);

const completion = await client.completions.create({ model, prompt: "The state of the Union", max_tokens: 24, temperature: 0 });
console.log(`completion (${completion.choices[0].finish_reason}, ${completion.usage.completion_tokens} tokens): ${JSON.stringify(completion.choices[0].text)}`);

let streamed = "";
const stream = await client.completions.create({ model, prompt: "The state of the Union", max_tokens: 24, temperature: 0, stream: true });
for await (const chunk of stream) streamed += chunk.choices[0]?.text ?? "";
if (streamed !== completion.choices[0].text) fail(`the stream gave ${JSON.stringify(streamed)}`);
console.log("streamed completion: the same text");

const chat = await client.chat.completions.create({ model, messages: [{ role: "user", content: "Say something." }], max_tokens: 24, temperature: 0.8, seed: 7 });
console.log(`chat (${chat.choices[0].finish_reason}): ${JSON.stringify(chat.choices[0].message.content)}`);

let chatStreamed = "";
const chatStream = await client.chat.completions.create({ model, messages: [{ role: "user", content: "Say something." }], max_tokens: 24, temperature: 0.8, seed: 7, stream: true });
for await (const chunk of chatStream) chatStreamed += chunk.choices[0]?.delta?.content ?? "";
if (chatStreamed !== chat.choices[0].message.content) fail(`the chat stream gave ${JSON.stringify(chatStreamed)}`);
console.log("streamed chat: the same text");

// The forms chat UIs and agent frameworks send: content as text parts, the system role as "developer".
const asStrings = [{ role: "system", content: "Brief." }, { role: "user", content: "Hi." }];
const asParts = [{ role: "developer", content: [{ type: "text", text: "Brief." }] }, { role: "user", content: [{ type: "text", text: "Hi." }] }];
const [fromStrings, fromParts] = await Promise.all([asStrings, asParts].map((messages) => client.chat.completions.create({ model, messages, max_tokens: 4, temperature: 0 })));
if (fromParts.choices[0].message.content !== fromStrings.choices[0].message.content) fail(`text parts gave ${JSON.stringify(fromParts.choices[0].message.content)}`);
console.log("chat from text parts and a developer message: the same text");

const scored = await client.chat.completions.create({ model, messages: [{ role: "user", content: "Say something." }], max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 3 });
const tokens = scored.choices[0].logprobs?.content ?? fail("no logprobs in a chat answer that asked for them");
if (tokens.length !== scored.usage.completion_tokens) fail(`${tokens.length} logprobs for ${scored.usage.completion_tokens} tokens`);
for (const t of tokens) {
  if (!(t.logprob <= 0) || t.top_logprobs.length !== 3 || t.top_logprobs[0].logprob !== t.logprob) fail(`logprobs ${JSON.stringify(t)}`);
}
console.log(`chat logprobs: ${tokens.map((t) => `${JSON.stringify(t.token)} ${t.logprob.toFixed(3)}`).join(", ")}`);

// A batch of scoring requests as an evaluation harness sends them: each prompt echoed with its
// tokens' log-probabilities (the first has none) and one generated token.
const prompts = ["The state of the Union", "Fellow citizens"];
const scoredBatch = await client.completions.create({ model, prompt: prompts, max_tokens: 1, temperature: 0, echo: true, logprobs: 1 });
if (scoredBatch.choices.length !== prompts.length) fail(`${scoredBatch.choices.length} choices for ${prompts.length} prompts`);
for (const choice of scoredBatch.choices) {
  const lp = choice.logprobs ?? fail("no logprobs in a scoring answer");
  if (!choice.text.startsWith(prompts[choice.index])) fail(`choice ${choice.index} does not echo its prompt: ${JSON.stringify(choice.text)}`);
  if (lp.tokens.length !== lp.token_logprobs.length || lp.token_logprobs[0] !== null) fail(`logprobs ${JSON.stringify(lp)}`);
  const total = lp.token_logprobs.slice(1, -1).reduce((sum, x) => sum + x, 0);
  console.log(`scored ${JSON.stringify(prompts[choice.index])}: ${total.toFixed(2)} nats over its ${lp.tokens.length - 2} tokens after the first`);
}

try {
  await client.completions.create({ model, prompt: "x", max_tokens: 1_000_000 });
  fail("max_tokens 1,000,000 was accepted");
} catch (error) {
  if (!(error instanceof OpenAI.APIError) || error.status !== 400) throw error;
  console.log(`refused as the client expects: ${error.status} ${error.message}`);
}
console.log("ok");
