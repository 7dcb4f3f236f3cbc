// The client's retry, timeout and checking rules against a scripted local HTTP server.
// Run with `node --test test/` (Node's built-in runner; no test framework to install).

import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { after, before, test } from 'node:test';

import { ApiError, JobsClient } from '../client.js';

const JOB = { job_id: 'job-1', state: 'deferred' };
let server;
let baseUrl;
let script = [];
const seen = [];

before(async () => {
  server = createServer((request, response) => {
    seen.push({ method: request.method, url: request.url, requestId: request.headers['x-request-id'], auth: request.headers.authorization });
    const step = script.shift() ?? { status: 500, body: 'script exhausted' };
    if (step.hang) return; // never answer: only the client's timeout ends this
    response.writeHead(step.status, { 'Content-Type': step.type ?? 'application/json', ...(step.headers ?? {}) });
    response.end(typeof step.body === 'string' ? step.body : JSON.stringify(step.body));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  baseUrl = `http://127.0.0.1:${server.address().port}`;
});

after(() => {
  server.closeAllConnections();
  server.close();
});

function client(options = {}) {
  const lines = [];
  const api = new JobsClient({
    baseUrl,
    tokenSource: async () => 'a.b.c',
    timeoutMs: 300,
    maxAttempts: 3,
    baseBackoffMs: 1,
    maxBackoffMs: 5,
    log: (severity, message, fields) => lines.push({ severity, message, ...fields }),
    ...options,
  });
  return { api, lines };
}

function reset(steps) {
  script = steps;
  seen.length = 0;
}

const googleError = (code, status, field) => ({
  error: { code, status, message: `${field}: bad`, details: [{ '@type': 'type.googleapis.com/google.rpc.BadRequest', fieldViolations: [{ field, description: 'bad' }] }] },
});

test('429 and 503 are retried with one request ID until a job comes back', async () => {
  reset([
    { status: 429, body: googleError(429, 'RESOURCE_EXHAUSTED', 'x'), headers: { 'Retry-After': '0' } },
    { status: 503, body: googleError(503, 'UNAVAILABLE', 'x') },
    { status: 201, body: JOB },
  ]);
  const { api, lines } = client();
  const result = await api.schedule({ job_id: 'job-1' });
  assert.deepEqual(result.job, JOB);
  assert.equal(result.created, true);
  assert.equal(seen.length, 3);
  assert.equal(new Set(seen.map((s) => s.requestId)).size, 1);
  assert.equal(seen[0].auth, 'Bearer a.b.c');
  assert.ok(lines.every((line) => line.request_id === result.requestId));
});

test('retries are bounded: after maxAttempts the last error is thrown', async () => {
  reset([503, 503, 503, 503].map((status) => ({ status, body: googleError(status, 'UNAVAILABLE', 'x') })));
  const { api, lines } = client();
  await assert.rejects(api.get('job-1'), (error) => error instanceof ApiError && error.httpStatus === 503);
  assert.equal(seen.length, 3);
  assert.equal(lines.at(-1).severity, 'ERROR');
});

test('a 400 is final and names the field', async () => {
  reset([{ status: 400, body: googleError(400, 'INVALID_ARGUMENT', 'due_at') }]);
  const { api } = client();
  await assert.rejects(api.schedule({}), (error) => error.status === 'INVALID_ARGUMENT' && error.fields[0] === 'due_at');
  assert.equal(seen.length, 1);
});

test('a server that never answers is cut off by the timeout, and retried a bounded number of times', async () => {
  reset([{ hang: true }, { hang: true }, { hang: true }]);
  const { api } = client({ timeoutMs: 100 });
  await assert.rejects(api.get('job-1'), /timeout|aborted/i);
  assert.equal(seen.length, 3);
});

test('a 2xx that is not a JSON job is an error, not a success', async () => {
  reset([{ status: 200, type: 'text/html', body: '<html>proxy</html>' }]);
  const { api } = client();
  await assert.rejects(api.get('job-1'), /without a job/);
});

test('a non-Google error body still becomes an ApiError with its status', async () => {
  reset([{ status: 502, type: 'text/html', body: '<html>bad gateway</html>' }]);
  const { api } = client();
  await assert.rejects(api.get('job-1'), (error) => error.httpStatus === 502 && error.message.includes('bad gateway'));
});

test('job IDs are percent-encoded and the verb follows them', async () => {
  reset([{ status: 200, body: { ...JOB, state: 'cancelled' } }]);
  const { api } = client();
  await api.cancel('media.delete_source:m/1:d', 'why');
  assert.equal(seen[0].url, '/v1/jobs/media.delete_source%3Am%2F1%3Ad:cancel');
});
