// /settings/team: the tenant's members and their roles; owners and admins add members, change roles and remove them.
import { useState } from 'preact/hooks';
import { call, listAll } from '../sdk';
import { ErrorText, Form, props, Table, useAction, useLoad, when, type Me } from '../ui';

interface Member {
  userId: string;
  email: string;
  name: string;
  role: string;
  joinedAt: string;
}

function MemberRow({ member, roles, self, changed }: { member: Member; roles: string[]; self: boolean; changed: (s: string) => void }) {
  const { error, act } = useAction(changed);
  return (
    <tr>
      <th scope="row">
        {member.name} <span class="mono">{member.email}</span>
        <ErrorText error={error} />
      </th>
      <td>
        <label class="sr-only" for={`role-${member.userId}`}>{`Role of ${member.email}`}</label>
        <select
          id={`role-${member.userId}`}
          value={member.role}
          disabled={self}
          onChange={(e) => {
            const role = (e.target as HTMLSelectElement).value;
            void act(
              () => call('updateTeamMember', { params: { userId: member.userId }, body: { role: role as any } }),
              `${member.email} is now ${role}.`,
            );
          }}
        >
          {roles.map((r) => (
            <option value={r}>{r}</option>
          ))}
        </select>
      </td>
      <td>{when(member.joinedAt)}</td>
      <td>
        {!self && (
          <button
            type="button"
            class="secondary"
            aria-label={`Remove ${member.email}`}
            onClick={() => act(() => call('removeTeamMember', { params: { userId: member.userId } }), `Removed ${member.email}.`)}
          >
            Remove
          </button>
        )}
      </td>
    </tr>
  );
}

export default function TeamPage({ me }: { me: Me }) {
  const roles = props<{ roles: string[] }>().roles ?? [];
  const { data, error, reload } = useLoad(() => listAll('listTeamMembers', {}) as unknown as Promise<Member[]>, []);
  const [status, setStatus] = useState('');
  const changed = (s: string) => {
    setStatus(s);
    void reload();
  };
  return (
    <>
      <h1>Team</h1>
      <p role="status">{status}</p>
      <ErrorText error={error} />
      <Table id="members" columns={['Member', 'Role', 'Joined', '']} empty="No members." rows={data}>
        {data?.map((m) => (
          <MemberRow key={m.userId} member={m} roles={roles} self={m.userId === me.user.id} changed={changed} />
        ))}
      </Table>
      <section aria-labelledby="add-title">
        <h2 id="add-title">Add a member</h2>
        <Form
          submit="Add member"
          reset
          onSubmit={async (f) => {
            await call('addTeamMember', {
              body: {
                email: f.get('email') as string,
                name: f.get('name') as string,
                role: f.get('role') as any,
                password: f.get('password') as string,
              },
            });
            changed(`Added ${f.get('email')}.`);
          }}
        >
          <p class="field">
            <label for="member-email">Email</label>
            <input id="member-email" name="email" type="email" required maxLength={254} autoComplete="off" />
          </p>
          <p class="field">
            <label for="member-name">Name</label>
            <input id="member-name" name="name" required maxLength={200} />
          </p>
          <p class="field">
            <label for="member-role">Role</label>
            <select id="member-role" name="role">
              {roles.map((r) => (
                <option value={r}>{r}</option>
              ))}
            </select>
          </p>
          <p class="field">
            <label for="member-password">Initial password</label>
            <input
              id="member-password"
              name="password"
              type="password"
              required
              minLength={8}
              maxLength={200}
              autoComplete="new-password"
            />
          </p>
        </Form>
      </section>
    </>
  );
}
