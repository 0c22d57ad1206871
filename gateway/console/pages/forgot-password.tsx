// /forgot-password: asks for a reset link. The answer is the same whether or not the address has an account.
import { useState } from 'preact/hooks';
import { Form } from '../ui';
import { call } from '../sdk';

export default function ForgotPasswordPage() {
  const [sent, setSent] = useState('');
  return (
    <>
      <h1>Reset your password</h1>
      <Form
        submit="Send reset link"
        onSubmit={async (f) => {
          await call('forgotPassword', { body: { email: String(f.get('email')) } });
          setSent('If an account has this address, an email with a reset link is on its way.');
        }}
      >
        <p class="field">
          <label for="forgot-email">Email</label>
          <input id="forgot-email" name="email" type="email" required maxLength={254} autoComplete="email" />
        </p>
      </Form>
      <p role="status">{sent}</p>
      <p>
        <a href="/login">Back to sign in</a>
      </p>
    </>
  );
}
