// A real OpenID provider (oidc-provider, installed by scripts/install-tools) on loopback, for
// hangar's sign-in tests (tests/oidc.rs). It serves one client (hangar) that may use the
// authorization code flow (PKCE) and the device flow, and logs in whoever the test names:
//
//   node provider.mjs   with OIDC_PROVIDER_DIR (the package's folder), CLIENT_ID,
//                       CLIENT_SECRET, REDIRECT_URI (http://127.0.0.1/...) in the environment
//   prints `issuer: http://127.0.0.1:PORT` once it listens (on a port of its own choosing).
//
// Test controls (this process only ever listens on 127.0.0.1):
//   POST /test/login {"email": E, "email_verified": B}: the person every login interaction
//     signs in as from now on (the interaction pages finish themselves: no form to fill).
//   POST /test/id-token {"mode": M}: doctors the next ID token the token endpoint answers with,
//     as an attacker in the middle or a broken issuer would: "tamper" (email changed, signature
//     kept), "audience" / "expired" / "issuer" / "nonce" (re-signed with the provider's own key),
//     "unsigned" (alg none), "unknown-kid" (re-signed with a key of no key set, naming key id
//     `no-such-key`). Each mode applies once.
//   POST /test/rotate-key: the provider rotates its signing key, as an issuer does: from now on
//     its key set (/jwks) holds only a new key (id `test-key-2`) and every ID token is signed
//     with it.
//   GET /test/jwks-reads: how many times the key set was read ({"reads": N}).
import http from 'node:http';
import crypto from 'node:crypto';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const dir = process.env.OIDC_PROVIDER_DIR;
const { default: Provider } = await import(pathToFileURL(path.join(dir, 'lib/index.js')).href);

const clientId = process.env.CLIENT_ID;
const clientSecret = process.env.CLIENT_SECRET;
const redirectUri = process.env.REDIRECT_URI;

const { privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
const jwk = { ...privateKey.export({ format: 'jwk' }), kid: 'test-key', alg: 'RS256', use: 'sig' };

let signing = { privateKey, kid: 'test-key' };
let rotated = null;
let jwksReads = 0;

const accounts = new Map();
let login = null;
let doctor = null;

const b64 = (buf) => Buffer.from(buf).toString('base64url');
const unb64 = (s) => JSON.parse(Buffer.from(s, 'base64url').toString());

function resign(header, payload, key = signing) {
  const h = { ...header, kid: key.kid };
  const input = `${b64(JSON.stringify(h))}.${b64(JSON.stringify(payload))}`;
  return `${input}.${b64(crypto.sign('sha256', Buffer.from(input), key.privateKey))}`;
}

function publicJwk(key) {
  return { ...crypto.createPublicKey(key.privateKey).export({ format: 'jwk' }), kid: key.kid, alg: 'RS256', use: 'sig' };
}

function doctored(idToken, mode) {
  const [h, p, s] = idToken.split('.');
  const header = unb64(h);
  const payload = unb64(p);
  const now = Math.floor(Date.now() / 1000);
  switch (mode) {
    case 'tamper':
      return `${h}.${b64(JSON.stringify({ ...payload, email: 'mallory@example.com' }))}.${s}`;
    case 'audience':
      return resign(header, { ...payload, aud: 'some-other-client', azp: undefined });
    case 'expired':
      return resign(header, { ...payload, iat: now - 7200, exp: now - 3600 });
    case 'issuer':
      return resign(header, { ...payload, iss: 'http://127.0.0.1:9/another-issuer' });
    case 'nonce':
      return resign(header, { ...payload, nonce: 'a-nonce-of-another-sign-in' });
    case 'unsigned':
      return `${b64(JSON.stringify({ alg: 'none', typ: 'JWT' }))}.${p}.`;
    case 'unknown-kid': {
      const stranger = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;
      return resign(header, payload, { privateKey: stranger, kid: 'no-such-key' });
    }
    default:
      throw new Error(`unknown id-token mode ${mode}`);
  }
}

async function body(req) {
  let text = '';
  for await (const chunk of req) text += chunk;
  return JSON.parse(text || '{}');
}

const server = http.createServer();
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: clientId,
      client_secret: clientSecret,
      // A native client's loopback redirect (RFC 8252 7.3): any port of 127.0.0.1 matches, so
      // the test's hangar serve may take any free port.
      application_type: 'native',
      redirect_uris: [redirectUri],
      grant_types: ['authorization_code', 'urn:ietf:params:oauth:grant-type:device_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
    },
  ],
  jwks: { keys: [jwk] },
  cookies: { keys: [crypto.randomBytes(32).toString('hex')] },
  claims: { openid: ['sub'], email: ['email', 'email_verified'] },
  // The email claims in the ID token itself (as most issuers put them when asked for `email`).
  conformIdTokenClaims: false,
  features: {
    devInteractions: { enabled: false },
    deviceFlow: { enabled: true },
  },
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  findAccount: async (ctx, sub) => {
    const a = accounts.get(sub);
    if (!a) return undefined;
    return {
      accountId: sub,
      claims: async () => ({ sub, email: a.email, email_verified: a.email_verified }),
    };
  },
});

provider.use(async (ctx, next) => {
  if (ctx.method === 'POST' && ctx.path === '/test/login') {
    login = await body(ctx.req);
    ctx.body = { ok: true };
    return;
  }
  if (ctx.method === 'POST' && ctx.path === '/test/id-token') {
    doctor = (await body(ctx.req)).mode;
    ctx.body = { ok: true };
    return;
  }
  if (ctx.method === 'POST' && ctx.path === '/test/rotate-key') {
    signing = { privateKey: crypto.generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey, kid: 'test-key-2' };
    rotated = publicJwk(signing);
    ctx.body = { ok: true };
    return;
  }
  if (ctx.method === 'GET' && ctx.path === '/test/jwks-reads') {
    ctx.body = { reads: jwksReads };
    return;
  }
  if (ctx.method === 'GET' && ctx.path === '/jwks') {
    jwksReads += 1;
    if (rotated) {
      ctx.type = 'application/json';
      ctx.body = { keys: [rotated] };
      return;
    }
  }
  if (ctx.method === 'GET' && ctx.path.startsWith('/interaction/')) {
    const details = await provider.interactionDetails(ctx.req, ctx.res);
    let result;
    if (details.prompt.name === 'login') {
      if (!login) {
        ctx.status = 409;
        ctx.body = 'no login set: POST /test/login first';
        return;
      }
      const sub = `sub-${crypto.createHash('sha256').update(login.email).digest('hex').slice(0, 16)}`;
      accounts.set(sub, { ...login });
      result = { login: { accountId: sub } };
    } else {
      const grant = new provider.Grant({
        accountId: details.session.accountId,
        clientId: details.params.client_id,
      });
      grant.addOIDCScope('openid email');
      result = { consent: { grantId: await grant.save() } };
    }
    const to = await provider.interactionResult(ctx.req, ctx.res, result, {
      mergeWithLastSubmission: true,
    });
    ctx.status = 303;
    ctx.redirect(to);
    return;
  }
  await next();
  if (ctx.path === '/token' && ctx.status === 200 && ctx.body?.id_token) {
    let idToken = ctx.body.id_token;
    if (rotated) {
      // Signed with the new key (oidc-provider keeps signing with the key it was given).
      const [h, p] = idToken.split('.');
      idToken = resign(unb64(h), unb64(p));
    }
    if (doctor) {
      const mode = doctor;
      doctor = null;
      idToken = doctored(idToken, mode);
    }
    ctx.body = { ...ctx.body, id_token: idToken };
  }
});

server.on('request', provider.callback());
process.stdout.write(`issuer: ${issuer}\n`);
// A reader gone is no reason to stop serving.
process.stdout.on('error', () => {});
