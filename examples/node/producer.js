// The producer a Node.js service would embed: schedule a cleanup 30 days out, read it back,
// cancel it (as when a retention decision is withdrawn). Prints one JSON summary on stdout;
// logs (one JSON line per request, with its request ID) go to stderr. Exit 0 on success,
// 1 on any refused or failed call.
//
//   DEFERRED_JOBS_API_URL=https://deferred-jobs-api-….run.app node producer.js media-123 decision-9
//
// Locally, after `make run`: `source .local/env && node examples/node/producer.js` (the env
// file sets DEFERRED_JOBS_API_URL, DEFERRED_JOBS_TOKEN_URL and DEFERRED_JOBS_CALLER).

import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { ApiError, JobsClient, jsonLogger } from './client.js';
import { tokenSourceFromEnv } from './tokens.js';

const THIRTY_DAYS_S = 30 * 24 * 3600;

export async function run({ env = process.env, argv = process.argv.slice(2), out = process.stdout } = {}) {
  const [subject = 'media-123', decision = `decision-${Date.now()}`] = argv;
  const client = new JobsClient({
    baseUrl: env.DEFERRED_JOBS_API_URL,
    tokenSource: tokenSourceFromEnv(env),
    timeoutMs: Number(env.DEFERRED_JOBS_TIMEOUT_MS || 10_000),
    log: jsonLogger(),
  });
  const scheduled = await client.schedule({
    decision_id: decision,
    action: 'media.delete_source',
    subject,
    params: { bucket: env.DEFERRED_JOBS_BUCKET || 'media-src', objects: [`${subject}/source.mp4`] },
    delay: `${THIRTY_DAYS_S}s`,
  });
  const jobId = scheduled.job.job_id;
  const read = await client.get(jobId);
  const cancelled = await client.cancel(jobId, 'retention decision withdrawn');
  const summary = {
    job_id: jobId,
    created: scheduled.created,
    due_at: scheduled.job.due_at,
    read_state: read.job.state,
    final_state: cancelled.job.state,
    request_ids: [scheduled.requestId, read.requestId, cancelled.requestId],
  };
  out.write(`${JSON.stringify(summary)}\n`);
  return summary;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === resolve(process.argv[1])) {
  run().catch((error) => {
    const fields = error instanceof ApiError ? { status: error.status, fields: error.fields, request_id: error.requestId } : {};
    jsonLogger()('ERROR', error.message, fields);
    process.exitCode = 1;
  });
}
