// /verify-email/:token: the link sent at sign-up. Opening it verifies the address.
import { useEffect, useState } from 'preact/hooks';
import { call } from '../sdk';
import { linkToken } from '../ui';

export default function VerifyEmailPage() {
  const [state, setState] = useState<{ done?: boolean; error?: string }>({});
  useEffect(() => {
    call('verifyEmail', { body: { token: linkToken() } }).then(
      () => setState({ done: true }),
      (err: unknown) => setState({ error: (err as Error).message }),
    );
  }, []);
  return (
    <>
      <h1>Verify your email</h1>
      {state.done && (
        <p role="status">
          Your email address is verified. <a href="/projects">Open the console</a>
        </p>
      )}
      {state.error && (
        <p role="alert" class="error">
          {state.error}
        </p>
      )}
      {!state.done && !state.error && <p>Verifying…</p>}
    </>
  );
}
