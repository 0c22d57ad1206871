// /mcp-servers: the MCP servers agents may call (CONTRACT 11): register one (its bearer token a tenant secret),
// its status and tools, change its name, URL or token, list the tools again, delete. Which tools an agent may call is the agent's own setting
// (config.tools): each server shows the agents allowed its tools, and links to the agent's form that edits them.
import { useState } from 'preact/hooks';
import { call, listAll, type Item } from '../sdk';
import { ErrorText, Form, Table, text, useAction, useLoad, useSearch } from '../ui';
import type { Agent } from './agents';

type Server = Item<'listMcpServers'>;

/** The agents allowed some of the server's tools, each linked to its settings. */
function AllowedFor({ serverId, agents }: { serverId: string; agents?: Agent[] }) {
  const allowed = (agents ?? []).flatMap((a) =>
    a.config.tools.filter((g) => g.serverId === serverId).map((g) => ({ agent: a, tools: g.allow })),
  );
  if (allowed.length === 0) return <>no agent</>;
  return (
    <ul class="plain">
      {allowed.map(({ agent, tools }) => (
        <li key={agent.id}>
          <a href={`/agents/${agent.id}#edit-title`}>{agent.name}</a>
          {`: ${tools.join(', ')}`}
        </li>
      ))}
    </ul>
  );
}

type Secret = Item<'listSecrets'>;

/** Name, URL and bearer token of the add form (`id` "mcp"), or of one server's change form (`of` its name, its values shown). */
function ServerFields({ id, of, server, secrets }: { id: string; of?: string; server?: Server; secrets?: Secret[] }) {
  const label = (text: string) => (of ? `${text} of ${of}` : text);
  const current = (server as any)?.auth?.secret as string | undefined;
  return (
    <>
      <p class="field">
        <label for={`${id}-name`}>{label('Name')}</label>
        <input id={`${id}-name`} name="name" required maxLength={100} defaultValue={server?.name} />
      </p>
      <p class="field">
        <label for={`${id}-url`}>{label('Server URL')}</label>
        <input id={`${id}-url`} name="url" type="url" required maxLength={2000} defaultValue={server?.url} />
      </p>
      <p class="field">
        <label for={`${id}-secret`}>{label('Bearer token from the secret')}</label>
        <select id={`${id}-secret`} name="secret">
          <option value="">No authentication</option>
          {secrets?.map((s) => (
            <option value={s.name} selected={s.name === current}>
              {s.name}
            </option>
          ))}
        </select>
      </p>
    </>
  );
}

function ServerRow({
  server,
  agents,
  secrets,
  changed,
}: {
  server: Server;
  agents?: Agent[];
  secrets?: Secret[];
  changed: (m: string) => void;
}) {
  const { error, act } = useAction(changed);
  const [editing, setEditing] = useState(false);
  const s = server as any;
  return (
    <tr>
      <th scope="row">
        {s.name}
        {editing && (
          <Form
            submit={`Save ${s.name}`}
            onSubmit={async (f) => {
              const secret = text(f, 'secret');
              const next = (await call('updateMcpServer', {
                params: { id: s.id },
                body: { name: text(f, 'name')!, url: text(f, 'url')!, auth: secret ? { type: 'bearer', secret } : null },
              })) as any;
              setEditing(false);
              changed(
                next.status === 'ready'
                  ? `Saved ${next.name}: ${next.tools.length} tools.`
                  : `Saved ${next.name}, not reachable: ${next.error}`,
              );
            }}
          >
            <ServerFields id={`edit-${s.id}`} of={s.name} server={server} secrets={secrets} />
          </Form>
        )}
      </th>
      <td>{s.url}</td>
      <td>{s.status === 'error' ? `error: ${s.error ?? ''}` : s.status}</td>
      <td>{(s.tools ?? []).map((t: any) => `${t.name}${t.readOnly ? ' (read-only)' : ''}`).join(', ') || 'none'}</td>
      <td>
        <AllowedFor serverId={s.id} agents={agents} />
      </td>
      <td class="actions">
        <button type="button" class="secondary" aria-label={`Edit ${s.name}`} onClick={() => setEditing(!editing)}>
          {editing ? 'Cancel' : 'Edit'}
        </button>{' '}
        <button
          type="button"
          class="secondary"
          aria-label={`Refresh tools of ${s.name}`}
          onClick={() => act(() => call('refreshMcpServer', { params: { id: s.id } }), `Listed the tools of ${s.name} again.`)}
        >
          Refresh tools
        </button>{' '}
        <button
          type="button"
          class="secondary"
          aria-label={`Delete ${s.name}`}
          onClick={() => act(() => call('deleteMcpServer', { params: { id: s.id } }), `Deleted ${s.name}.`)}
        >
          Delete
        </button>
        <ErrorText error={error} />
      </td>
    </tr>
  );
}

export default function McpServersPage() {
  const servers = useLoad(() => listAll('listMcpServers', {}), []);
  const secrets = useLoad(() => listAll('listSecrets', {}), []);
  const agents = useLoad(() => listAll('listAgents', {}) as unknown as Promise<Agent[]>, []);
  const [status, setStatus] = useState('');
  const { shown, box } = useSearch(servers.data, (s: any) => s.name);
  const changed = (message: string) => {
    setStatus(message);
    void servers.reload();
  };
  return (
    <>
      <h1>MCP servers</h1>
      <section aria-labelledby="add-title">
        <h2 id="add-title">Add a server</h2>
        <Form
          submit="Add server"
          reset
          onSubmit={async (f) => {
            const secret = text(f, 'secret');
            const s = (await call('createMcpServer', {
              body: { name: text(f, 'name')!, url: text(f, 'url')!, ...(secret ? { auth: { type: 'bearer', secret } } : {}) },
            })) as any;
            changed(s.status === 'ready' ? `Added ${s.name}: ${s.tools.length} tools.` : `Added ${s.name}, not reachable: ${s.error}`);
          }}
        >
          <ServerFields id="mcp" secrets={secrets.data} />
        </Form>
      </section>
      <p role="status">{status}</p>
      <ErrorText error={servers.error ?? secrets.error ?? agents.error} />
      <section aria-labelledby="list-title">
        <h2 id="list-title">Servers</h2>
        {box}
        <Table id="mcp-servers" columns={['Name', 'URL', 'Status', 'Tools', 'Allowed for', '']} empty="No MCP servers yet." rows={shown}>
          {shown?.map((s: any) => (
            <ServerRow key={s.id} server={s} agents={agents.data} secrets={secrets.data} changed={changed} />
          ))}
        </Table>
      </section>
    </>
  );
}
