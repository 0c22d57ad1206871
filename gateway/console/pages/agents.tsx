// /agents: the tenant's agents and a create form; each links to its page (/agents/:id).
import { call, listAll, type Item } from '../sdk';
import { ErrorText, Form, modelNames, Options, Table, useLoad, when, useSearch } from '../ui';

export interface ToolGrant {
  serverId: string;
  allow: string[];
}

export interface Agent {
  id: string;
  name: string;
  systemPrompt: string;
  config: {
    autonomyLevel: string;
    maxSteps: number;
    timeBudgetSeconds: number;
    model: string | null;
    temperature: number | null;
    tools: ToolGrant[];
  };
  createdAt: string;
  updatedAt: string;
}

type Server = Item<'listMcpServers'>;

export const AUTONOMY = ['manual', 'supervised', 'autonomous'] as const;

/** What the agent form chooses from: the catalogue's model names and the MCP servers with their tools. */
export interface AgentChoices {
  models: string[];
  servers: Server[];
}

export const loadAgentChoices = async (): Promise<AgentChoices> => {
  const [models, servers] = await Promise.all([listAll('listModels', {}), listAll('listMcpServers', {})]);
  return { models: modelNames(models), servers };
};

/** A tool's checkbox value: the server's id and the tool's name (ids hold no colon). */
const toolValue = (serverId: string, tool: string) => `${serverId}:${tool}`;

/** One MCP server's tools as checkboxes, those the agent may call ticked. */
function ServerTools({ server, allowed }: { server: Server; allowed: string[] }) {
  if (server.tools.length === 0) return null;
  return (
    <fieldset>
      <legend>{`Tools of ${server.name}`}</legend>
      {server.tools.map((t) => (
        <label class="check">
          <input type="checkbox" name="tool" value={toolValue(server.id, t.name)} defaultChecked={allowed.includes(t.name)} />{' '}
          {t.readOnly ? `${t.name} (read-only)` : t.name}
        </label>
      ))}
    </fieldset>
  );
}

/** The fields an agent is created and edited with (labelled, keyboard-usable). */
export function AgentFields({ agent, choices }: { agent?: Agent; choices?: AgentChoices }) {
  const current = agent?.config.model ?? '';
  // A model set through the API that the catalogue does not list stays choosable, so saving keeps it.
  const models = current && choices && !choices.models.includes(current) ? [current, ...choices.models] : (choices?.models ?? []);
  const grants = agent?.config.tools ?? [];
  return (
    <>
      <p class="field">
        <label for="agent-name">Name</label>
        <input id="agent-name" name="name" required maxLength={200} defaultValue={agent?.name} />
      </p>
      <p class="field">
        <label for="agent-prompt">System prompt</label>
        <textarea id="agent-prompt" name="systemPrompt" rows={4} maxLength={20_000} defaultValue={agent?.systemPrompt} />
      </p>
      <p class="field">
        <label for="agent-model">Model</label>
        <select id="agent-model" name="model">
          <option value="">Default model</option>
          <Options values={models} current={current} />
        </select>
      </p>
      <p class="field">
        <label for="agent-autonomy">Autonomy</label>
        <select id="agent-autonomy" name="autonomyLevel">
          <Options values={AUTONOMY} current={agent?.config.autonomyLevel ?? 'supervised'} />
        </select>
      </p>
      <p class="field">
        <label for="agent-steps">Maximum steps</label>
        <input id="agent-steps" name="maxSteps" type="number" min={1} max={50} defaultValue={String(agent?.config.maxSteps ?? 10)} />
      </p>
      {choices?.servers.map((s) => (
        <ServerTools key={s.id} server={s} allowed={grants.find((g) => g.serverId === s.id)?.allow ?? []} />
      ))}
    </>
  );
}

/** The tools ticked, one grant per server; grants on servers the form did not show (not listed) are kept. */
function toolGrants(f: FormData, choices: AgentChoices, agent?: Agent): ToolGrant[] {
  const shown = new Set(choices.servers.map((s) => s.id));
  const byServer = new Map<string, string[]>();
  for (const v of f.getAll('tool') as string[]) {
    const at = v.indexOf(':');
    byServer.set(v.slice(0, at), [...(byServer.get(v.slice(0, at)) ?? []), v.slice(at + 1)]);
  }
  const kept = (agent?.config.tools ?? []).filter((g) => !shown.has(g.serverId));
  return [...kept, ...[...byServer].map(([serverId, allow]) => ({ serverId, allow }))];
}

/**
 * The create or update body. No model chosen: on create none is sent; on update null (back to the tenant's
 * default). Tools are sent only when the servers were loaded, so a failed list never clears the grants.
 */
export const agentBody = (f: FormData, choices?: AgentChoices, agent?: Agent) => {
  const model = (f.get('model') as string | null) || null;
  return {
    name: f.get('name'),
    systemPrompt: f.get('systemPrompt') ?? '',
    config: {
      autonomyLevel: f.get('autonomyLevel'),
      maxSteps: Number(f.get('maxSteps')),
      ...(model || agent ? { model } : {}),
      ...(choices ? { tools: toolGrants(f, choices, agent) } : {}),
    },
  };
};

export default function AgentsPage() {
  const { data, error, reload } = useLoad(() => listAll('listAgents', {}) as Promise<Agent[]>, []);
  const { shown, box } = useSearch(data, (a) => a.name);
  const choices = useLoad(loadAgentChoices, []);
  return (
    <>
      <h1>Agents</h1>
      <section aria-labelledby="create-title">
        <h2 id="create-title">Create an agent</h2>
        <Form
          submit="Create agent"
          onSubmit={async (f) => {
            const agent = (await call('createAgent', { body: agentBody(f, choices.data) as any })) as unknown as Agent;
            location.assign(`/agents/${agent.id}`);
            await reload();
          }}
        >
          <AgentFields choices={choices.data} />
        </Form>
      </section>
      <ErrorText error={error ?? choices.error} />
      <section aria-labelledby="list-title">
        <h2 id="list-title">Your agents</h2>
        {box}
        <Table id="agents" columns={['Name', 'Model', 'Autonomy', 'Updated']} empty="No agents yet." rows={shown}>
          {shown?.map((a) => (
            <tr key={a.id}>
              <th scope="row">
                <a href={`/agents/${a.id}`}>{a.name}</a>
              </th>
              <td>{a.config.model ?? 'default'}</td>
              <td>{a.config.autonomyLevel}</td>
              <td>{when(a.updatedAt)}</td>
            </tr>
          ))}
        </Table>
      </section>
    </>
  );
}
