// The official openai npm client against a running router (chat and text
// completions, the model list, and the Responses API), as cmd/continuum's
// TestClientLibraries runs it against `continuum serve --demo`:
//
//   CONTINUUM_URL=http://127.0.0.1:8080 node --test scripts/client-tests/openai.test.mjs
//
// CONTINUUM_URL is the router's base URL, CONTINUUM_MODEL the model the demo
// serves. The client is not in the clone: .ci/run installs it from this
// directory's package-lock.json into CONTINUUM_CLIENTS, by default
// ${CONTINUUM_CACHE:-$HOME/.cache/continuum}/client-tests, and it is loaded
// from there.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';

const prefix =
  process.env.CONTINUUM_CLIENTS ||
  join(process.env.CONTINUUM_CACHE || join(homedir(), '.cache', 'continuum'), 'client-tests');
const { OpenAI, NotFoundError, BadRequestError } = createRequire(join(prefix, 'package.json'))('openai');

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

// The Responses API, converted to chat completions for the demo's
// direct-mode frontend. The simulated model answers with the words of one
// sentence, one a token (16 without max_output_tokens), and calls the
// first function offered unless the input ends with its output.
const weather = {
  type: 'function',
  name: 'get_weather',
  description: 'The weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};

// The text of a response's messages (a streamed final response has no
// output_text helper: the SDK adds it to created responses only).
function outputText(res) {
  return res.output.filter((item) => item.type === 'message')
    .flatMap((item) => item.content).filter((c) => c.type === 'output_text').map((c) => c.text).join('');
}

function assertResponseUsage(usage, outputTokens) {
  assert.ok(usage, 'no usage');
  assert.ok(usage.input_tokens > 0, `input_tokens ${usage.input_tokens}`);
  assert.equal(usage.output_tokens, outputTokens);
  assert.equal(usage.total_tokens, usage.input_tokens + usage.output_tokens);
}

test('responses.create answers a response with output_text', async () => {
  const res = await client.responses.create({ model, instructions: 'Be brief.', input: 'Hello from the responses test' });
  assert.equal(res.object, 'response');
  assert.match(res.id, /^resp_/);
  assert.equal(res.model, model);
  assert.equal(res.status, 'completed');
  assert.equal(res.output.length, 1);
  assert.equal(res.output[0].type, 'message');
  assert.equal(res.output[0].role, 'assistant');
  assert.equal(res.output[0].content[0].type, 'output_text');
  assert.equal(res.output_text.split(' ').length, 16, `output_text ${JSON.stringify(res.output_text)}`);
  assertResponseUsage(res.usage, 16);
  assertCreated(res.created_at);

  const cut = await client.responses.create({
    model, max_output_tokens: 4,
    input: [{ role: 'developer', content: 'Be brief.' }, { role: 'user', content: [{ type: 'input_text', text: 'Hello' }] }],
  });
  assert.equal(cut.status, 'incomplete');
  assert.equal(cut.incomplete_details.reason, 'max_output_tokens');
  assert.equal(cut.output_text, 'Dynamo pinned this request');
  assertResponseUsage(cut.usage, 4);
});

test('responses.create: a function call round trip', async () => {
  const input = [{ role: 'user', content: 'What is the weather in Paris?' }];
  const call = await client.responses.create({ model, tools: [weather], input });
  assert.equal(call.status, 'completed');
  const fc = call.output.find((item) => item.type === 'function_call');
  assert.ok(fc, JSON.stringify(call.output));
  assert.equal(fc.name, 'get_weather');
  assert.deepEqual(JSON.parse(fc.arguments), { city: 'sim' });
  assert.ok(fc.call_id);
  assert.ok(call.usage.output_tokens > 0);

  const answer = await client.responses.create({
    model, tools: [weather],
    input: [...input, fc, { type: 'function_call_output', call_id: fc.call_id, output: 'Sunny, 21 °C' }],
  });
  assert.equal(answer.status, 'completed');
  assert.ok(answer.output_text.startsWith('Dynamo pinned this request'), answer.output_text);
  assert.ok(answer.usage.input_tokens > call.usage.input_tokens, 'the call and its output are part of the prompt');
});

test('responses.stream: the Responses event sequence and finalResponse()', async () => {
  const stream = client.responses.stream({ model, max_output_tokens: 5, input: 'Hello from the stream test' });
  const events = [];
  stream.on('event', (event) => events.push(event));
  const final = await stream.finalResponse();
  const types = events.map((e) => e.type);
  assert.deepEqual(types, [
    'response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added',
    ...Array(5).fill('response.output_text.delta'),
    'response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.incomplete',
  ]);
  assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i), 'sequence numbers count from 0');
  const text = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
  assert.equal(text.trim(), 'Dynamo pinned this request to');
  const done = events.at(-1).response;
  assert.equal(done.status, 'incomplete');
  assert.equal(done.incomplete_details.reason, 'max_output_tokens');
  assertResponseUsage(done.usage, 5);
  assert.equal(outputText(final), text);

  const whole = await client.responses.stream({ model, input: 'Hello again' }).finalResponse();
  assert.equal(whole.status, 'completed');
  assert.equal(outputText(whole).trim().split(' ').length, 16);
  assertResponseUsage(whole.usage, 16);

  const toolEvents = [];
  const tool = client.responses.stream({ model, tools: [weather], input: 'Weather in Oslo?' });
  tool.on('event', (event) => toolEvents.push(event.type));
  const toolFinal = await tool.finalResponse();
  assert.deepEqual(toolEvents.filter((t) => t.startsWith('response.function_call_arguments')).at(-1), 'response.function_call_arguments.done');
  const fc = toolFinal.output.find((item) => item.type === 'function_call');
  assert.deepEqual(JSON.parse(fc.arguments), { city: 'sim' });
  assert.equal(toolFinal.status, 'completed');
  assert.ok(toolFinal.usage.output_tokens > 0);
});

test('responses.create refuses conversation state with a 400', async () => {
  await assert.rejects(
    client.responses.create({ model, input: 'hi', previous_response_id: 'resp_123' }),
    (err) => {
      assert.ok(err instanceof BadRequestError, `${err?.constructor?.name}: ${err?.message}`);
      assert.equal(err.param, 'previous_response_id');
      assert.match(err.message, /no conversation state/);
      return true;
    });
  await assert.rejects(client.responses.create({ model, input: 'hi', store: true }), (err) => err.status === 400 && err.param === 'store');
});

test('a Responses request is pinned like a chat request', async () => {
  const res = await fetch(`${baseURL}/v1/responses`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-backend': '' },
    body: JSON.stringify({ model, input: 'hi', max_output_tokens: 2 }),
  });
  assert.equal(res.status, 200);
  await res.text();
  assert.equal(res.headers.get('x-continuum-routing-path'), 'disaggregated');
  assert.match(res.headers.get('x-continuum-worker') ?? '', /^\d+$/);
});
