// The team page's invitations (CONTRACT.md 13): invite by email with a role, and the pending invitations with Revoke.
import { ErrorText, Form, Table, useAction, useLoad, when } from '../ui';
import { call, listAll } from '../sdk';

export function Invitations({ roles, changed }: { roles: string[]; changed: (s: string) => void }) {
  const { data, error, reload } = useLoad(async () => {
    const pending = [];
    for (const i of await listAll('listInvitations', {})) if (i.status === 'pending') pending.push(i);
    return pending;
  }, []);
  const { error: actionError, act } = useAction((s) => {
    changed(s);
    void reload();
  });
  return (
    <section aria-labelledby="invite-title">
      <h2 id="invite-title">Invite a member</h2>
      <Form
        submit="Invite"
        reset
        onSubmit={async (f) => {
          const email = String(f.get('email'));
          await call('createInvitation', { body: { email, role: f.get('role') as 'member' } });
          changed(`Invited ${email}: they get an email with a link to join.`);
          void reload();
        }}
      >
        <p class="field">
          <label for="invite-email">Email</label>
          <input id="invite-email" name="email" type="email" required maxLength={254} autoComplete="off" />
        </p>
        <p class="field">
          <label for="invite-role">Role</label>
          <select id="invite-role" name="role">
            {roles.map((r) => (
              <option value={r} selected={r === 'member'}>
                {r}
              </option>
            ))}
          </select>
        </p>
      </Form>
      <h3>Pending invitations</h3>
      <ErrorText error={error ?? actionError} />
      <Table id="invitations" columns={['Email', 'Role', 'Expires', '']} empty="No pending invitations." rows={data}>
        {data?.map((i) => (
          <tr key={i.id}>
            <th scope="row" class="mono">
              {i.email}
            </th>
            <td>{i.role}</td>
            <td>{when(i.expiresAt)}</td>
            <td>
              <button
                type="button"
                class="secondary"
                aria-label={`Revoke the invitation of ${i.email}`}
                onClick={() => act(() => call('revokeInvitation', { params: { id: i.id } }), `Revoked the invitation of ${i.email}.`)}
              >
                Revoke
              </button>
            </td>
          </tr>
        ))}
      </Table>
    </section>
  );
}
