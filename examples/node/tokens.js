// Where the client's ID tokens come from.
//
// In production: google-auth-library's ID-token client, which takes the service account of
// the runtime (the metadata server on Cloud Run, GKE or GCE, or the key named by
// GOOGLE_APPLICATION_CREDENTIALS) and mints a Google-signed token for the API's URL as
// audience (https://cloud.google.com/run/docs/authenticating/service-to-service). It caches
// the token and refreshes it before it expires.
//
// Locally (`make run`), no Google account exists: the built-in OIDC issuer signs tokens with
// its own key, and the local API trusts that key instead of Google's. `POST /token` with
// {"audience", "email"} returns {"token"}. Nothing else differs: the API verifies the token the
// same way.

import { GoogleAuth } from 'google-auth-library';

export function googleIdTokenSource(audience) {
  const auth = new GoogleAuth();
  let client;
  return async () => {
    client ??= await auth.getIdTokenClient(audience);
    const headers = await client.getRequestHeaders();
    // google-auth-library 10 returns a Headers object; earlier majors a plain object.
    const value = typeof headers.get === 'function' ? headers.get('authorization') : headers.Authorization;
    if (!value?.startsWith('Bearer ')) throw new Error('google-auth-library returned no ID token');
    return value.slice('Bearer '.length);
  };
}

export function localIssuerTokenSource(tokenUrl, { audience, email, timeoutMs = 5_000 }) {
  return async () => {
    const response = await fetch(tokenUrl, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ audience, email }),
      signal: AbortSignal.timeout(timeoutMs),
    });
    if (!response.ok) throw new Error(`local issuer ${tokenUrl} answered ${response.status}`);
    const { token } = await response.json();
    if (typeof token !== 'string') throw new Error(`local issuer ${tokenUrl} returned no token`);
    return token;
  };
}

// DEFERRED_JOBS_TOKEN_URL set: the local issuer (with DEFERRED_JOBS_CALLER as the email);
// otherwise google-auth-library. The audience is DEFERRED_JOBS_API_AUDIENCE, or the API URL.
export function tokenSourceFromEnv(env = process.env) {
  const audience = env.DEFERRED_JOBS_API_AUDIENCE || env.DEFERRED_JOBS_API_URL;
  if (!audience) throw new Error('set DEFERRED_JOBS_API_URL (and optionally DEFERRED_JOBS_API_AUDIENCE)');
  if (env.DEFERRED_JOBS_TOKEN_URL) {
    if (!env.DEFERRED_JOBS_CALLER) throw new Error('DEFERRED_JOBS_TOKEN_URL needs DEFERRED_JOBS_CALLER');
    return localIssuerTokenSource(env.DEFERRED_JOBS_TOKEN_URL, { audience, email: env.DEFERRED_JOBS_CALLER });
  }
  return googleIdTokenSource(audience);
}
