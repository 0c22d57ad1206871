// /invitations/:token: the emailed invitation's link. The invitee sets a name and password, or signs in with one of
// the configured OpenID providers (whose verified email must be the invited one); either way they are signed in and
// land in the tenant's console.
import { useState } from 'preact/hooks';
import { ErrorText, Form, linkToken, useLoad } from '../ui';
import { call, describe } from '../sdk';

/** To the provider, with the invitation sealed in the sign-in's state; its callback page completes the join. */
async function joinWith(provider: string): Promise<void> {
  const { url } = await call('startOAuth', { params: { provider }, query: { invitation: linkToken() } });
  location.assign(url);
}

export default function InvitationPage() {
  const providers = useLoad(() => call('listOAuthProviders', {}), []);
  const [error, setError] = useState<string>();
  return (
    <>
      <h1>Join your team</h1>
      <p>Choose your name and a password to accept the invitation.</p>
      <Form
        submit="Join"
        onSubmit={async (f) => {
          await call('acceptInvitation', {
            body: { token: linkToken(), name: String(f.get('name')), password: String(f.get('password')) },
          });
          location.assign('/projects');
        }}
      >
        <p class="field">
          <label for="invite-name">Name</label>
          <input id="invite-name" name="name" required maxLength={200} autoComplete="name" />
        </p>
        <p class="field">
          <label for="invite-password">Password</label>
          <input id="invite-password" name="password" type="password" required minLength={8} maxLength={200} autoComplete="new-password" />
        </p>
      </Form>
      {providers.data?.providers.length ? (
        <section aria-labelledby="join-with-title">
          <h2 id="join-with-title">Or sign in with your identity provider</h2>
          <p>
            {providers.data.providers.map((p) => (
              <button type="button" class="secondary" key={p} onClick={() => joinWith(p).catch((err: unknown) => setError(describe(err)))}>
                {`Join with ${p}`}
              </button>
            ))}
          </p>
          <ErrorText error={error} />
        </section>
      ) : null}
    </>
  );
}
