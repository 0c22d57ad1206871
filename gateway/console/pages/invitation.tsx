// /invitations/:token: the emailed invitation's link. The invitee sets a name and password, is signed in, and lands
// in the tenant's console.
import { Form } from '../ui';
import { call } from '../sdk';
import { linkToken } from '../ui';

export default function InvitationPage() {
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
    </>
  );
}
