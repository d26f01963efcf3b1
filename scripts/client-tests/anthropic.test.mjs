// The official Anthropic npm client (@anthropic-ai/sdk) against a running
// router's Messages ingress, as cmd/continuum's TestClientLibraries runs it
// against `continuum serve --demo`:
//
//   CONTINUUM_URL=http://127.0.0.1:8080 node --test scripts/client-tests/anthropic.test.mjs
//
// The demo's simulated model answers with the words of one sentence, one a
// token: 256 tokens when max_tokens is larger (ending by itself), else
// max_tokens of them; it calls the first tool offered unless the
// conversation ends with a tool result. The client is loaded from
// CONTINUUM_CLIENTS (by default ${CONTINUUM_CACHE:-$HOME/.cache/continuum}/client-tests),
// where .ci/run installs this directory's package-lock.json.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';

const prefix =
  process.env.CONTINUUM_CLIENTS ||
  join(process.env.CONTINUUM_CACHE || join(homedir(), '.cache', 'continuum'), 'client-tests');
const sdk = createRequire(join(prefix, 'package.json'))('@anthropic-ai/sdk');
const Anthropic = sdk.Anthropic ?? sdk.default;
const { NotFoundError, BadRequestError, APIError } = sdk;

const baseURL = process.env.CONTINUUM_URL;
assert.ok(baseURL, 'set CONTINUUM_URL to the router, e.g. http://127.0.0.1:8080');
const model = process.env.CONTINUUM_MODEL || 'Qwen/Qwen3-32B';
// The SDK sends its key as x-api-key (which the router takes as it takes a
// bearer token) and appends /v1/messages to the base URL. No retries: a
// 5xx must fail the test, not be tried again behind its back.
const client = new Anthropic({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 30_000 });
const prefixed = new Anthropic({ baseURL: `${baseURL}/anthropic`, apiKey: 'unused', maxRetries: 0, timeout: 30_000 });

const weather = {
  name: 'get_weather',
  description: 'The weather in a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};

function textOf(message) {
  return message.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
}

// promptTokens is a request's whole input: the Messages API counts the
// prompt tokens read from the cache apart from input_tokens.
function promptTokens(usage) {
  return usage.input_tokens + (usage.cache_read_input_tokens ?? 0);
}

function assertUsage(usage, outputTokens) {
  assert.ok(usage, 'no usage');
  assert.ok(usage.input_tokens >= 0 && promptTokens(usage) > 0, `input_tokens ${usage.input_tokens}`);
  // Both cache counts are always there, as the Messages API sends them.
  assert.ok(Number.isInteger(usage.cache_read_input_tokens) && usage.cache_read_input_tokens >= 0,
    `cache_read_input_tokens ${usage.cache_read_input_tokens}`);
  assert.equal(usage.cache_creation_input_tokens, 0);
  assert.equal(usage.output_tokens, outputTokens);
}

test('messages.create: a plain message, cut by max_tokens or ending by itself', async () => {
  const res = await client.messages.create({ model, max_tokens: 5, messages: [{ role: 'user', content: 'Hello!' }] });
  assert.equal(res.type, 'message');
  assert.equal(res.role, 'assistant');
  assert.equal(res.model, model);
  assert.match(res.id, /^msg_/);
  assert.equal(res.content.length, 1);
  assert.equal(res.content[0].type, 'text');
  assert.equal(res.content[0].text.split(' ').length, 5, `text ${JSON.stringify(res.content[0].text)}`);
  assert.equal(res.stop_reason, 'max_tokens');
  assert.equal(res.stop_sequence, null);
  assertUsage(res.usage, 5);

  const free = await prefixed.messages.create({ model, max_tokens: 1024, messages: [{ role: 'user', content: 'Hello!' }] });
  assert.equal(free.stop_reason, 'end_turn', 'under a large max_tokens the answer ends by itself');
  assertUsage(free.usage, 256);
});

test('messages.create: the system prompt reaches the model', async () => {
  const messages = [{ role: 'user', content: 'Hello!' }];
  const bare = await client.messages.create({ model, max_tokens: 3, messages });
  const system = 'You are a terse assistant who answers in three words, whatever the question. '.repeat(8);
  const withString = await client.messages.create({ model, max_tokens: 3, system, messages });
  const withBlocks = await client.messages.create({ model, max_tokens: 3, system: [{ type: 'text', text: system }], messages });
  assert.ok(promptTokens(withString.usage) > promptTokens(bare.usage) + 50,
    `input tokens ${promptTokens(withString.usage)} with a system prompt, ${promptTokens(bare.usage)} without`);
  assert.equal(promptTokens(withBlocks.usage), promptTokens(withString.usage), 'a text block system is the same prompt');
  // The same prompt again: the demo's workers hold its blocks, and say so.
  assert.ok(withBlocks.usage.cache_read_input_tokens > 0, JSON.stringify(withBlocks.usage));
  assertUsage(withString.usage, 3);
});

test('messages.create: a multi-turn conversation', async () => {
  const one = await client.messages.create({ model, max_tokens: 4, messages: [{ role: 'user', content: 'What is Dynamo?' }] });
  const three = await client.messages.create({
    model, max_tokens: 4,
    messages: [
      { role: 'user', content: 'What is Dynamo?' },
      { role: 'assistant', content: textOf(one) },
      { role: 'user', content: [{ type: 'text', text: 'And what does the router pin?' }] },
    ],
  });
  assert.equal(three.stop_reason, 'max_tokens');
  assert.ok(promptTokens(three.usage) > promptTokens(one.usage), 'the earlier turns are part of the prompt');
  assert.equal(textOf(three).split(' ').length, 4);
});

test('messages.create: a tool use round trip', async () => {
  const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
  const call = await client.messages.create({ model, max_tokens: 256, tools: [weather], messages });
  assert.equal(call.stop_reason, 'tool_use');
  const uses = call.content.filter((b) => b.type === 'tool_use');
  assert.equal(uses.length, 1, JSON.stringify(call.content));
  assert.equal(uses[0].name, 'get_weather');
  assert.deepEqual(uses[0].input, { city: 'sim' }, 'the input is parsed JSON');
  assert.ok(uses[0].id, 'the tool_use block has an id');
  assert.ok(call.usage.output_tokens > 0);

  const answer = await client.messages.create({
    model, max_tokens: 1024, tools: [weather],
    messages: [
      ...messages,
      { role: 'assistant', content: call.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: uses[0].id, content: 'Sunny, 21 °C' }] },
    ],
  });
  assert.equal(answer.stop_reason, 'end_turn', 'after the tool result the model answers in text');
  assert.ok(textOf(answer).startsWith('Dynamo pinned this request'), textOf(answer));
  assert.ok(promptTokens(answer.usage) > promptTokens(call.usage), 'the tool call and result are part of the prompt');

  const forced = await client.messages.create({
    model, max_tokens: 256, tools: [{ ...weather, name: 'other' }, weather],
    tool_choice: { type: 'tool', name: 'get_weather' }, messages,
  });
  assert.equal(forced.content.find((b) => b.type === 'tool_use').name, 'get_weather');
  const none = await client.messages.create({ model, max_tokens: 3, tools: [weather], tool_choice: { type: 'none' }, messages });
  assert.equal(none.stop_reason, 'max_tokens');
  assert.equal(none.content[0].type, 'text');
});

test('messages.create: stop sequences', async () => {
  const res = await client.messages.create({
    model, max_tokens: 64, stop_sequences: ['never said', 'request'],
    messages: [{ role: 'user', content: 'Hello!' }],
  });
  assert.equal(res.stop_reason, 'stop_sequence');
  assert.equal(res.stop_sequence, 'request');
  assert.equal(textOf(res), 'Dynamo pinned this ', 'the text ends before the stop sequence');
  assertUsage(res.usage, 4);
});

test('messages.stream: events and finalMessage()', async () => {
  const stream = client.messages.stream({ model, max_tokens: 6, messages: [{ role: 'user', content: 'Hello!' }] });
  const types = [];
  let text = '';
  stream.on('streamEvent', (event) => types.push(event.type));
  stream.on('text', (delta) => { text += delta; });
  const final = await stream.finalMessage();
  assert.deepEqual(types, [
    'message_start', 'content_block_start',
    ...Array(6).fill('content_block_delta'),
    'content_block_stop', 'message_delta', 'message_stop',
  ]);
  assert.equal(textOf(final), text);
  assert.equal(text.trim().split(' ').length, 6, JSON.stringify(text));
  assert.equal(final.stop_reason, 'max_tokens');
  assertUsage(final.usage, 6);

  const stopped = await client.messages.stream({
    model, max_tokens: 64, stop_sequences: ['request'], messages: [{ role: 'user', content: 'Hello!' }],
  }).finalMessage();
  assert.equal(stopped.stop_reason, 'stop_sequence');
  assert.equal(stopped.stop_sequence, 'request');
  assert.equal(textOf(stopped), 'Dynamo pinned this ');

  const tool = await client.messages.stream({
    model, max_tokens: 256, tools: [weather], messages: [{ role: 'user', content: 'Weather in Oslo?' }],
  }).finalMessage();
  assert.equal(tool.stop_reason, 'tool_use');
  const use = tool.content.find((b) => b.type === 'tool_use');
  assert.deepEqual(use.input, { city: 'sim' }, 'input_json_delta pieces make the input');
  assert.ok(tool.usage.output_tokens > 0);
});

test('the Messages error shape: unknown model, invalid request', async () => {
  await assert.rejects(
    client.messages.create({ model: 'no-such-model', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] }),
    (err) => {
      assert.ok(err instanceof NotFoundError, `${err?.constructor?.name}: ${err?.message}`);
      assert.equal(err.status, 404);
      assert.equal(err.error.type, 'error');
      assert.equal(err.error.error.type, 'not_found_error');
      return true;
    });
  await assert.rejects(
    client.messages.create({ model, messages: [{ role: 'user', content: 'hi' }] }),
    (err) => {
      assert.ok(err instanceof BadRequestError, `${err?.constructor?.name}: ${err?.message}`);
      assert.equal(err.error.error.type, 'invalid_request_error');
      assert.match(err.error.error.message, /max_tokens/);
      return true;
    });
});

test('messages.countTokens: counted with the pinned tokenizer and chat template', async () => {
  // The demo routes by KV overlap; its router loads the workers' pinned
  // tokenizer in the background and answers 501 until it has.
  const count = async (content) => {
    for (let i = 0; ; i++) {
      try {
        return (await client.messages.countTokens({ model, system: 'Be brief.', messages: [{ role: 'user', content }] })).input_tokens;
      } catch (err) {
        if (!(err instanceof APIError) || err.status !== 501 || i >= 100) throw err;
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  };
  const short = await count('hi');
  assert.ok(Number.isInteger(short) && short > 0, `input_tokens ${short}`);
  // The simulated workers' tokenizer has one token per byte: 98 more
  // bytes are 98 more tokens.
  assert.equal(await count('hi' + 'x'.repeat(98)), short + 98);
});

test('a Messages request is pinned like a chat request', async () => {
  for (const stream of [false, true]) {
    const res = await fetch(`${baseURL}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01', 'x-api-key': 'unused', 'x-backend': '' },
      body: JSON.stringify({ model, max_tokens: 2, stream, messages: [{ role: 'user', content: 'hi' }] }),
    });
    assert.equal(res.status, 200);
    await res.text();
    assert.equal(res.headers.get('x-continuum-routing-path'), 'disaggregated');
    assert.match(res.headers.get('x-continuum-worker') ?? '', /^\d+$/);
    assert.match(res.headers.get('x-continuum-prefill-worker') ?? '', /^\d+$/);
  }
});
