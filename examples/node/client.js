// A production-shaped client of the schedule API (docs/api.md), on plain fetch.
//
// Every call: gets an ID token from its token source, carries one X-Request-Id across its
// retries (the API echoes and logs it), is bounded by a timeout (AbortSignal.timeout), and
// checks the answer: a 2xx must be a JSON job, anything else becomes an ApiError with
// Google's {code, message, status} and the named fields. 429 and 503 (and a timeout or a
// refused connection) are retried a bounded number of times with exponential backoff and
// full jitter, honouring Retry-After; every other answer is final. Retrying is safe because
// every operation of the API is idempotent by job ID: a repeated schedule answers 200 with
// the same job, a repeated cancel answers the cancelled job.

import { randomUUID } from 'node:crypto';

export const RETRYABLE_STATUSES = new Set([429, 503]);

export class ApiError extends Error {
  constructor({ httpStatus, code, status, message, fields, requestId }) {
    super(`${httpStatus} ${status}: ${message}`);
    this.name = 'ApiError';
    this.httpStatus = httpStatus;
    this.code = code;
    this.status = status;
    this.fields = fields;
    this.requestId = requestId;
  }
}

// One JSON line per event on stderr, so a log pipeline can parse it.
export function jsonLogger(stream = process.stderr) {
  return (severity, message, fields = {}) => {
    stream.write(`${JSON.stringify({ severity, message, ...fields })}\n`);
  };
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export class JobsClient {
  constructor({
    baseUrl,
    tokenSource,
    timeoutMs = 10_000,
    maxAttempts = 4,
    baseBackoffMs = 200,
    maxBackoffMs = 5_000,
    log = jsonLogger(),
  }) {
    if (!baseUrl) throw new Error('baseUrl is required');
    if (typeof tokenSource !== 'function') throw new Error('tokenSource must be a function');
    if (!(maxAttempts >= 1)) throw new Error('maxAttempts must be at least 1');
    this.baseUrl = baseUrl.replace(/\/+$/, '');
    this.tokenSource = tokenSource;
    this.timeoutMs = timeoutMs;
    this.maxAttempts = maxAttempts;
    this.baseBackoffMs = baseBackoffMs;
    this.maxBackoffMs = maxBackoffMs;
    this.log = log;
  }

  schedule(job) {
    return this.request('POST', '/v1/jobs', job);
  }

  get(jobId) {
    return this.request('GET', `/v1/jobs/${encodeURIComponent(jobId)}`);
  }

  cancel(jobId, reason) {
    return this.request('POST', `/v1/jobs/${encodeURIComponent(jobId)}:cancel`, reason ? { reason } : {});
  }

  reschedule(jobId, when) {
    return this.request('POST', `/v1/jobs/${encodeURIComponent(jobId)}:reschedule`, when);
  }

  // The job and whether it was created, or an ApiError; never an unchecked response.
  async request(method, path, body) {
    const requestId = randomUUID();
    for (let attempt = 1; ; attempt += 1) {
      const started = Date.now();
      let outcome;
      try {
        outcome = await this.#once(method, path, body, requestId);
      } catch (error) {
        outcome = { transportError: error };
      }
      const fields = { request_id: requestId, method, path, attempt, latency_ms: Date.now() - started };
      const retryable = outcome.transportError !== undefined || RETRYABLE_STATUSES.has(outcome.httpStatus);
      if (!retryable) {
        this.log(outcome.error ? 'WARNING' : 'INFO', `${method} ${path} → ${outcome.httpStatus}`, {
          ...fields,
          status: outcome.httpStatus,
        });
        if (outcome.error) throw outcome.error;
        return { job: outcome.job, created: outcome.httpStatus === 201, requestId };
      }
      const why = outcome.transportError ? String(outcome.transportError.message) : outcome.httpStatus;
      if (attempt >= this.maxAttempts) {
        this.log('ERROR', `${method} ${path} gave up after ${attempt} attempts: ${why}`, fields);
        throw outcome.error ?? new Error(`${method} ${path}: ${why} (request ${requestId})`);
      }
      const delayMs = this.#backoff(attempt, outcome.retryAfterS);
      this.log('WARNING', `${method} ${path}: ${why}; retrying in ${delayMs} ms`, fields);
      await sleep(delayMs);
    }
  }

  async #once(method, path, body, requestId) {
    const token = await this.tokenSource();
    const headers = { Authorization: `Bearer ${token}`, 'X-Request-Id': requestId, Accept: 'application/json' };
    const init = { method, headers, signal: AbortSignal.timeout(this.timeoutMs) };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    const response = await fetch(this.baseUrl + path, init);
    // The body is read under the same timeout signal; a stalled body aborts too.
    const text = await response.text();
    const retryAfterS = Number.parseInt(response.headers.get('retry-after') ?? '', 10);
    const parsed = parseJson(text, response.headers.get('content-type'));
    if (response.ok) {
      if (!parsed || typeof parsed.job_id !== 'string' || typeof parsed.state !== 'string') {
        // Final, not retried: whatever answered is not the API, and asking again won't help.
        const error = new Error(`${method} ${path}: ${response.status} without a job in its body`);
        return { httpStatus: response.status, error };
      }
      return { httpStatus: response.status, job: parsed };
    }
    return { httpStatus: response.status, retryAfterS, error: toApiError(response.status, parsed, text, requestId) };
  }

  #backoff(attempt, retryAfterS) {
    const exponential = Math.min(this.maxBackoffMs, this.baseBackoffMs * 2 ** (attempt - 1));
    const jittered = Math.round(Math.random() * exponential);
    const floor = Number.isFinite(retryAfterS) ? Math.min(retryAfterS * 1000, this.maxBackoffMs) : 0;
    return Math.max(jittered, floor);
  }
}

function parseJson(text, contentType) {
  if (!contentType || !contentType.toLowerCase().startsWith('application/json')) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function toApiError(httpStatus, parsed, text, requestId) {
  const error = parsed && typeof parsed.error === 'object' ? parsed.error : undefined;
  const violations = (error?.details ?? []).flatMap((detail) => detail.fieldViolations ?? []);
  return new ApiError({
    httpStatus,
    code: error?.code ?? httpStatus,
    status: error?.status ?? 'UNKNOWN',
    // Not Google's error body (a proxy's HTML page, say): keep a little of it for the log.
    message: error?.message ?? text.slice(0, 200),
    fields: violations.map((violation) => violation.field),
    requestId,
  });
}
