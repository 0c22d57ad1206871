// The playground's past sessions (newest first): each opens at /chat/:sessionId, and can be deleted with its messages.
import { call, listAll } from '../sdk';
import { DeleteButton, ErrorText, Table, useAction, useLoad, when } from '../ui';

export function ChatSessions({ current }: { current: string | null }) {
  const sessions = useLoad(() => listAll('listChatSessions', {}), [current]);
  const { error, act } = useAction(() => void sessions.reload());
  const remove = (id: string) =>
    act(async () => {
      await call('deleteChatSession', { params: { id } });
      if (id === current) location.assign('/chat');
    }, 'Deleted.');
  return (
    <section aria-labelledby="sessions-title">
      <h2 id="sessions-title">Sessions</h2>
      <p>
        <a href="/chat">New session</a>
      </p>
      <ErrorText error={error ?? sessions.error} />
      <Table id="sessions" columns={['Session', 'Model', 'Started', '']} empty="No sessions yet." rows={sessions.data}>
        {sessions.data?.map((s) => {
          const name = s.title ?? `Session ${s.id}`;
          return (
            <tr key={s.id}>
              <th scope="row">
                <a href={`/chat/${encodeURIComponent(s.id)}`} aria-current={s.id === current ? 'page' : undefined}>
                  {name}
                </a>
              </th>
              <td>{s.model ?? 'default'}</td>
              <td>{when(s.createdAt)}</td>
              <td>
                <DeleteButton label={name} confirm={() => void remove(s.id)} />
              </td>
            </tr>
          );
        })}
      </Table>
    </section>
  );
}
