// The production token path, for real: google-auth-library asks the metadata server for an ID
// token, as it does on Cloud Run. A stand-in metadata server on 127.0.0.1 (GCE_METADATA_HOST,
// which gcp-metadata honours) answers as Google's does; nothing in tokens.js is faked.
// Run with `node --test test/`: each test file is its own process, so this file's environment
// (no credentials file, the stand-in metadata host) does not leak into the others.

import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { googleIdTokenSource, localIssuerTokenSource, tokenSourceFromEnv } from '../tokens.js';

const b64 = (value) => Buffer.from(JSON.stringify(value)).toString('base64url');
const idToken = (audience) =>
  [b64({ alg: 'RS256', kid: 'k' }), b64({ aud: audience, exp: Math.floor(Date.now() / 1000) + 3600 }), 'sig'].join('.');

let metadata;
let issuer;
const identityRequests = [];

before(async () => {
  metadata = createServer((request, response) => {
    const url = new URL(request.url, 'http://metadata');
    if (request.headers['metadata-flavor'] !== 'Google') {
      response.writeHead(403).end();
      return;
    }
    const headers = { 'Metadata-Flavor': 'Google', 'Content-Type': 'application/text' };
    if (url.pathname === '/computeMetadata/v1/instance/service-accounts/default/identity') {
      assert.equal(url.searchParams.get('format'), 'full');
      identityRequests.push(url.searchParams.get('audience'));
      response.writeHead(200, headers).end(idToken(url.searchParams.get('audience')));
    } else if (url.pathname === '/computeMetadata/v1/project/project-id') {
      response.writeHead(200, headers).end('test-project');
    } else if (url.pathname.startsWith('/computeMetadata/v1/instance')) {
      response.writeHead(200, headers).end('');
    } else {
      response.writeHead(404, headers).end();
    }
  });
  issuer = createServer((request, response) => {
    let body = '';
    request.on('data', (chunk) => (body += chunk));
    request.on('end', () => {
      const { audience, email } = JSON.parse(body);
      response.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify({ token: `${audience}|${email}` }));
    });
  });
  await Promise.all([metadata, issuer].map((server) => new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))));
  process.env.GCE_METADATA_HOST = `127.0.0.1:${metadata.address().port}`;
  process.env.HOME = mkdtempSync(join(tmpdir(), 'no-gcloud-')); // no application default credentials file
  delete process.env.GOOGLE_APPLICATION_CREDENTIALS;
});

after(() => {
  for (const server of [metadata, issuer]) {
    server.closeAllConnections();
    server.close();
  }
});

test('in production the token comes from google-auth-library for the API URL, cached', async () => {
  const source = googleIdTokenSource('https://deferred-jobs-api-123.europe-west1.run.app');
  const first = await source();
  const second = await source();
  assert.equal(JSON.parse(Buffer.from(first.split('.')[1], 'base64url')).aud, 'https://deferred-jobs-api-123.europe-west1.run.app');
  assert.equal(second, first);
  assert.deepEqual(identityRequests, ['https://deferred-jobs-api-123.europe-west1.run.app']);
});

test('the environment picks the local issuer only when DEFERRED_JOBS_TOKEN_URL is set', async () => {
  const tokenUrl = `http://127.0.0.1:${issuer.address().port}/token`;
  const local = tokenSourceFromEnv({
    DEFERRED_JOBS_API_URL: 'http://127.0.0.1:8102',
    DEFERRED_JOBS_TOKEN_URL: tokenUrl,
    DEFERRED_JOBS_CALLER: 'producer@p.iam.gserviceaccount.com',
  });
  assert.equal(await local(), 'http://127.0.0.1:8102|producer@p.iam.gserviceaccount.com');
  const direct = localIssuerTokenSource(tokenUrl, { audience: 'a', email: 'e' });
  assert.equal(await direct(), 'a|e');
  assert.throws(() => tokenSourceFromEnv({ DEFERRED_JOBS_API_URL: 'x', DEFERRED_JOBS_TOKEN_URL: tokenUrl }), /DEFERRED_JOBS_CALLER/);
  assert.throws(() => tokenSourceFromEnv({}), /DEFERRED_JOBS_API_URL/);
});
