// The official openai npm client against a running router, as
// cmd/continuum's TestOpenAIClient runs it against `continuum serve --demo`:
//
//   CONTINUUM_URL=http://127.0.0.1:8080 node --test scripts/openai-client/openai.test.mjs
//
// CONTINUUM_URL is the router's base URL, CONTINUUM_MODEL the model the demo
// serves. The client is not in the clone: .ci/run installs it from this
// directory's package-lock.json into CONTINUUM_OPENAI_CLIENT, by default
// ${CONTINUUM_CACHE:-$HOME/.cache/continuum}/openai-client, and it is loaded
// from there.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';

const prefix =
  process.env.CONTINUUM_OPENAI_CLIENT ||
  join(process.env.CONTINUUM_CACHE || join(homedir(), '.cache', 'continuum'), 'openai-client');
const { OpenAI, NotFoundError } = createRequire(join(prefix, 'package.json'))('openai');

const baseURL = process.env.CONTINUUM_URL;
assert.ok(baseURL, 'set CONTINUUM_URL to the router, e.g. http://127.0.0.1:8080');
const model = process.env.CONTINUUM_MODEL || 'Qwen/Qwen3-32B';
// No retries: a 5xx must fail the test, not be tried again behind its back.
const client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 30_000 });
const messages = [{ role: 'user', content: 'Hello from the openai client test' }];

// created is a Unix time in seconds, about now.
function assertCreated(created) {
  assert.ok(Number.isInteger(created), `created ${created} is not an integer`);
  assert.ok(Math.abs(Date.now() / 1000 - created) < 60, `created ${created} is not about now`);
}

function assertUsage(usage, completionTokens) {
  assert.ok(usage, 'no usage');
  assert.equal(usage.completion_tokens, completionTokens);
  assert.ok(usage.prompt_tokens > 0, `prompt_tokens ${usage.prompt_tokens}`);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
}

test('chat.completions.create answers a chat.completion', async () => {
  const res = await client.chat.completions.create({ model, messages, max_tokens: 5 });
  assert.equal(res.object, 'chat.completion');
  assert.equal(res.model, model);
  assertCreated(res.created);
  assert.equal(res.choices.length, 1);
  const [choice] = res.choices;
  assert.equal(choice.message.role, 'assistant');
  assert.equal(typeof choice.message.content, 'string');
  assert.equal(choice.message.content.split(' ').length, 5, `content ${JSON.stringify(choice.message.content)}`);
  assert.equal(choice.finish_reason, 'length', 'max_tokens cut the answer');
  assertUsage(res.usage, 5);

  const free = await client.chat.completions.create({ model, messages });
  assert.equal(free.choices[0].finish_reason, 'stop', 'without max_tokens the answer ends by itself');
  assert.ok(free.choices[0].message.content.length > 0);
});

test('a chat stream with include_usage ends with a usage chunk', async () => {
  const stream = await client.chat.completions.create({
    model, messages, max_completion_tokens: 6, stream: true, stream_options: { include_usage: true },
  });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, [], 'the usage chunk has no choices');
  assertUsage(last.usage, 6);
  const content = chunks.slice(0, -1);
  assert.equal(content.length, 6);
  let text = '';
  const finishes = [];
  for (const chunk of content) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    assert.equal(chunk.id, content[0].id);
    assertCreated(chunk.created);
    assert.equal(chunk.choices.length, 1);
    text += chunk.choices[0].delta.content ?? '';
    if (chunk.choices[0].finish_reason) finishes.push(chunk.choices[0].finish_reason);
  }
  assert.equal(content[0].choices[0].delta.role, 'assistant');
  assert.equal(text.trim().split(' ').length, 6, `assembled text ${JSON.stringify(text)}`);
  assert.deepEqual(finishes, ['length'], 'one finish reason, on the last content chunk');

  // The wire itself: the stream ends with data: [DONE].
  const raw = await fetch(`${baseURL}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model, messages, max_tokens: 2, stream: true, stream_options: { include_usage: true } }),
  });
  assert.equal(raw.status, 200);
  assert.match(raw.headers.get('content-type'), /^text\/event-stream/);
  assert.ok((await raw.text()).endsWith('data: [DONE]\n\n'), 'the stream does not end with data: [DONE]');
});

test('completions.create answers a text_completion', async () => {
  const res = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 4 });
  assert.equal(res.object, 'text_completion');
  assert.equal(res.model, model);
  assertCreated(res.created);
  assert.equal(res.choices.length, 1);
  assert.equal(typeof res.choices[0].text, 'string');
  assert.equal(res.choices[0].text.split(' ').length, 4, `text ${JSON.stringify(res.choices[0].text)}`);
  assert.equal(res.choices[0].finish_reason, 'length');
  assertUsage(res.usage, 4);

  const stream = await client.completions.create({
    model, prompt: 'Once upon a time', max_tokens: 3, stream: true, stream_options: { include_usage: true },
  });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  assertUsage(chunks.at(-1).usage, 3);
  const content = chunks.slice(0, -1);
  assert.equal(content.length, 3);
  for (const chunk of content) {
    assert.equal(chunk.object, 'text_completion');
    assert.equal(typeof chunk.choices[0].text, 'string');
  }
  assert.equal(content.at(-1).choices[0].finish_reason, 'length');
});

test('models.list lists the demo model', async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.ok(ids.includes(model), `models ${JSON.stringify(ids)}`);
});

test('an unknown model raises NotFoundError with code model_not_found', async () => {
  for (const call of [
    () => client.chat.completions.create({ model: 'no-such-model', messages }),
    () => client.completions.create({ model: 'no-such-model', prompt: 'hi' }),
  ]) {
    await assert.rejects(call, (err) => {
      assert.ok(err instanceof NotFoundError, `${err?.constructor?.name}: ${err?.message}`);
      assert.equal(err.status, 404);
      assert.equal(err.code, 'model_not_found');
      assert.equal(err.param, 'model');
      assert.equal(err.type, 'invalid_request_error');
      return true;
    });
  }
});
