// /reset-password/:token: the emailed reset link. A new password ends every session; the user then signs in again.
import { useState } from 'preact/hooks';
import { Form } from '../ui';
import { call } from '../sdk';
import { linkToken } from '../ui';

export default function ResetPasswordPage() {
  const [done, setDone] = useState(false);
  return (
    <>
      <h1>Choose a new password</h1>
      {done ? (
        <p role="status">
          Your password is set. <a href="/login">Sign in</a>
        </p>
      ) : (
        <Form
          submit="Set password"
          onSubmit={async (f) => {
            await call('resetPassword', { body: { token: linkToken(), password: String(f.get('password')) } });
            setDone(true);
          }}
        >
          <p class="field">
            <label for="reset-password">New password</label>
            <input id="reset-password" name="password" type="password" required minLength={8} maxLength={200} autoComplete="new-password" />
          </p>
        </Form>
      )}
    </>
  );
}
