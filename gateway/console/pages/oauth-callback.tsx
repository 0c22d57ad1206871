// /oauth/:provider/callback: where an OpenID Connect provider sends the browser back. The page hands the provider's
// code and state to the API, which signs the visitor in (the session cookie), then goes to the console.
import { useEffect, useState } from 'preact/hooks';
import { call, describe } from '../sdk';
import { ErrorText } from '../ui';

async function complete(): Promise<void> {
  const query = new URLSearchParams(location.search);
  if (query.get('error')) throw new Error(`The identity provider said: ${query.get('error_description') ?? query.get('error')}`);
  const provider = decodeURIComponent(location.pathname.split('/')[2] ?? '');
  await call('authorizeOAuth', { params: { provider }, body: { code: query.get('code') ?? '', state: query.get('state') ?? '' } });
  location.replace('/projects');
}

export default function OAuthCallbackPage() {
  const [error, setError] = useState<string>();
  useEffect(() => void complete().catch((err: unknown) => setError(describe(err))), []);
  return (
    <>
      <h1>Signing you in…</h1>
      <ErrorText error={error} />
      <p>
        <a href="/login">Back to sign in</a>
      </p>
    </>
  );
}
