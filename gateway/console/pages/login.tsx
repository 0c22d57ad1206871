// /login: sign in, or with ?signup=1 create an account (a new tenant). Either way the visitor goes on to `next`
// (a path on this site only), else the console.
import { useEffect, useRef } from 'preact/hooks';
import { call } from '../sdk';
import { Form, Input } from '../ui';

/** Only a path on this site: never an address elsewhere (an open redirect). */
export function safeNext(next: string | null): string {
  return typeof next === 'string' && /^\/(?![/\\])/.test(next) ? next : '/projects';
}

const value = (f: FormData, name: string) => String(f.get(name) ?? '');

export default function LoginPage() {
  const query = new URLSearchParams(location.search);
  const signup = query.get('signup') === '1';
  const next = safeNext(query.get('next'));
  const form = useRef<HTMLDivElement>(null);
  // The first field has the focus, as a page load would give it (the form is drawn after the load).
  useEffect(() => form.current?.querySelector('input')?.focus(), [signup]);
  const other = `/login?${new URLSearchParams({ ...(signup ? {} : { signup: '1' }), next })}`;
  if (signup)
    return (
      <>
        <h1>Create an account</h1>
        <div ref={form}>
          <Form
            submit="Create account"
            onSubmit={async (f) => {
              await call('register', {
                body: {
                  name: value(f, 'name'),
                  email: value(f, 'email'),
                  password: value(f, 'password'),
                  tenantName: value(f, 'tenantName'),
                },
              });
              location.assign(next);
            }}
          >
            <Input id="name" name="name" label="Name" autoComplete="name" required maxLength={200} />
            <Input id="email" name="email" label="Email" type="email" autoComplete="email" required />
            <Input id="password" name="password" label="Password" type="password" autoComplete="new-password" required minLength={8} />
            <Input id="tenantName" name="tenantName" label="Organization" autoComplete="organization" required maxLength={200} />
          </Form>
        </div>
        <p>
          Already have an account? <a href={other}>Sign in</a>
        </p>
      </>
    );
  return (
    <>
      <h1>Sign in</h1>
      <div ref={form}>
        <Form
          submit="Sign in"
          onSubmit={async (f) => {
            await call('login', { body: { email: value(f, 'email'), password: value(f, 'password') } });
            location.assign(next);
          }}
        >
          <Input id="email" name="email" label="Email" type="email" autoComplete="username" required />
          <Input id="password" name="password" label="Password" type="password" autoComplete="current-password" required />
        </Form>
      </div>
      <p>
        <a href="/forgot-password">Forgot password?</a>
      </p>
      <p>
        New here? <a href={other}>Create an account</a>
      </p>
    </>
  );
}
