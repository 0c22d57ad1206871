// /agents: the tenant's agents and a create form; each links to its page (/agents/:id).
import { call, listAll } from '../sdk';
import { ErrorText, Form, Table, useLoad, when } from '../ui';

export interface Agent {
  id: string;
  name: string;
  systemPrompt: string;
  config: { autonomyLevel: string; maxSteps: number; timeBudgetSeconds: number; model: string | null; temperature: number | null };
  createdAt: string;
  updatedAt: string;
}

export const AUTONOMY = ['manual', 'supervised', 'autonomous'] as const;

/** The fields an agent is created and edited with (labelled, keyboard-usable). */
export function AgentFields({ agent }: { agent?: Agent }) {
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
        <label for="agent-autonomy">Autonomy</label>
        <select id="agent-autonomy" name="autonomyLevel" defaultValue={agent?.config.autonomyLevel ?? 'supervised'}>
          {AUTONOMY.map((a) => (
            <option value={a}>{a}</option>
          ))}
        </select>
      </p>
      <p class="field">
        <label for="agent-steps">Maximum steps</label>
        <input id="agent-steps" name="maxSteps" type="number" min={1} max={50} defaultValue={String(agent?.config.maxSteps ?? 10)} />
      </p>
    </>
  );
}

export const agentBody = (f: FormData) => ({
  name: f.get('name'),
  systemPrompt: f.get('systemPrompt') ?? '',
  config: { autonomyLevel: f.get('autonomyLevel'), maxSteps: Number(f.get('maxSteps')) },
});

export default function AgentsPage() {
  const { data, error, reload } = useLoad(() => listAll('listAgents', {}) as Promise<Agent[]>, []);
  return (
    <>
      <h1>Agents</h1>
      <section aria-labelledby="create-title">
        <h2 id="create-title">Create an agent</h2>
        <Form
          submit="Create agent"
          onSubmit={async (f) => {
            const agent = (await call('createAgent', { body: agentBody(f) as any })) as unknown as Agent;
            location.assign(`/agents/${agent.id}`);
            await reload();
          }}
        >
          <AgentFields />
        </Form>
      </section>
      <ErrorText error={error} />
      <section aria-labelledby="list-title">
        <h2 id="list-title">Your agents</h2>
        <Table id="agents" columns={['Name', 'Autonomy', 'Updated']} empty="No agents yet." rows={data}>
          {data?.map((a) => (
            <tr key={a.id}>
              <th scope="row">
                <a href={`/agents/${a.id}`}>{a.name}</a>
              </th>
              <td>{a.config.autonomyLevel}</td>
              <td>{when(a.updatedAt)}</td>
            </tr>
          ))}
        </Table>
      </section>
    </>
  );
}
