// /settings/team: the tenant's members and their roles; owners and admins invite members by email, change roles and
// remove them. (Adding a member with a password stays an API call.)
import { useState } from 'preact/hooks';
import { call, listAll } from '../sdk';
import { ErrorText, props, Table, useAction, useLoad, when, type Me, useSearch } from '../ui';
import { Invitations } from './invitations';

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
  const { shown, box } = useSearch(data, (m) => `${m.name} ${m.email}`, 'Search members');
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
      {box}
      <Table id="members" columns={['Member', 'Role', 'Joined', '']} empty="No members." rows={shown}>
        {shown?.map((m) => (
          <MemberRow key={m.userId} member={m} roles={roles} self={m.userId === me.user.id} changed={changed} />
        ))}
      </Table>
      <Invitations roles={roles} changed={changed} />
    </>
  );
}
