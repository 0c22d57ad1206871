// A real OpenID provider (the `oidc-provider` package, ESM only, hence its own process) for the external sign-in
// tests. Clients and accounts come from OIDC_CLIENTS / OIDC_ACCOUNTS (JSON). Its login and consent screens are
// replaced by an interaction that signs in the account named by `login_hint`, or the one set with
// GET /_test/login-as?account=ID: the tests drive the provider over HTTP, as a browser that follows redirects.
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import Provider from 'oidc-provider';

const clients = JSON.parse(process.env.OIDC_CLIENTS ?? '[]');
const accounts = JSON.parse(process.env.OIDC_ACCOUNTS ?? '{}');
let loginAs = Object.keys(accounts)[0];

const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const jwk = { ...privateKey.export({ format: 'jwk' }), kid: randomBytes(8).toString('hex'), alg: 'RS256', use: 'sig' };

const server = createServer();
await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
const issuer = `http://127.0.0.1:${server.address().port}`;

const provider = new Provider(issuer, {
  clients,
  jwks: { keys: [jwk] },
  cookies: { keys: [randomBytes(16).toString('hex')] },
  findAccount: async (_ctx, id) => (accounts[id] ? { accountId: id, claims: async () => ({ sub: id, ...accounts[id] }) } : undefined),
  claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'] },
  conformIdTokenClaims: false,
  pkce: { required: () => true },
  interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
  features: { devInteractions: { enabled: false } },
});

async function interaction(req, res) {
  const details = await provider.interactionDetails(req, res);
  const accountId = details.params.login_hint ?? loginAs;
  if (details.prompt.name === 'login')
    return provider.interactionFinished(req, res, { login: { accountId } }, { mergeWithLastSubmission: false });
  const grant = new provider.Grant({ accountId: details.session.accountId, clientId: details.params.client_id });
  grant.addOIDCScope(details.params.scope);
  const grantId = await grant.save();
  return provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
}

const callback = provider.callback();
server.on('request', (req, res) => {
  const url = new URL(req.url, issuer);
  if (url.pathname === '/_test/login-as') {
    loginAs = url.searchParams.get('account');
    res.writeHead(204).end();
  } else if (url.pathname.startsWith('/interaction/')) {
    interaction(req, res).catch((err) => {
      res.writeHead(500).end(String(err));
    });
  } else callback(req, res);
});

process.stdout.write(JSON.stringify({ issuer }) + '\n');
process.on('SIGTERM', () => server.close(() => process.exit(0)));
