// /agents/:id: edit the agent, run it in a project, and follow its runs: the list is read again every second while
// the page is visible (a run started from the API or another tab appears without a reload); a run waiting for approval offers Approve and Reject, a
// queued or running one Cancel.
import { useEffect, useState } from 'preact/hooks';
import { call, describe, listAll } from '../sdk';
import { DeleteButton, ErrorText, Form, useAction, useLoad, when } from '../ui';
import { AgentFields, agentBody, loadAgentChoices, type Agent } from './agents';
import type { Project } from './projects';

interface Step {
  index: number;
  type: 'model' | 'tool' | 'tool_call';
  status: string;
  text?: string;
  toolName?: string;
  /** tool_call (an MCP server's tool): its name and why it was refused or failed */
  tool?: string;
  error?: string | null;
  arguments?: unknown;
  result?: unknown;
}
interface Run {
  id: string;
  projectId: string;
  goal: string;
  status: string;
  output: string | null;
  error: string | null;
  steps: Step[];
  usage: { inputTokens: number; outputTokens: number };
  createdAt: string;
}

/** How often the runs are read again while the page is visible. */
const POLL_MS = 1000;
const agentId = () => decodeURIComponent(location.pathname.split('/')[2] ?? '');

function RunView({ run, acted }: { run: Run; acted: () => void }) {
  // Through useAction: its error shown in the run, and a 401 sends the visitor to sign in.
  const { error, act: action } = useAction(acted);
  const act = (verb: 'approve' | 'reject' | 'cancel') => () => {
    const params = { id: agentId(), run_id: run.id };
    if (verb === 'approve') return action(() => call('approveAgentRun', { params }), 'Approved.');
    if (verb === 'reject') return action(() => call('rejectAgentRun', { params, body: {} }), 'Rejected.');
    return action(() => call('cancelAgentRun', { params }), 'Cancelled.');
  };
  return (
    <li class="run" aria-label={`Run: ${run.goal}`}>
      <p>
        <strong>{run.goal}</strong> <span class="badge">{run.status}</span> <small>{when(run.createdAt)}</small>
      </p>
      <ol aria-label="Steps">
        {run.steps.map((s) => (
          <li key={s.index}>
            {s.type === 'model'
              ? `Model: ${s.text ?? ''}`
              : `Tool ${s.toolName ?? s.tool} (${s.status}): ${JSON.stringify(s.arguments ?? {})}${s.error ? ` ${s.error}` : ''}`}
          </li>
        ))}
      </ol>
      {run.output !== null && (
        <pre class="output" aria-label="Output">
          {run.output}
        </pre>
      )}
      {run.error && <p class="error">{run.error}</p>}
      <p class="actions">
        {run.status === 'requires_approval' && (
          <>
            <button type="button" onClick={act('approve')}>
              Approve
            </button>{' '}
            <button type="button" class="secondary" onClick={act('reject')}>
              Reject
            </button>
          </>
        )}
        {(run.status === 'queued' || run.status === 'running') && (
          <button type="button" class="secondary" onClick={act('cancel')}>
            Cancel
          </button>
        )}
      </p>
      <ErrorText error={error} />
    </li>
  );
}

export default function AgentPage() {
  const id = agentId();
  const agent = useLoad(() => call('getAgent', { params: { id } }) as unknown as Promise<Agent>, [id]);
  const projects = useLoad(() => listAll('listProjects', {}) as Promise<Project[]>, []);
  const choices = useLoad(loadAgentChoices, []);
  const [runs, setRuns] = useState<Run[]>([]);
  const [runsError, setRunsError] = useState<string>();
  const [tick, setTick] = useState(0);
  const refresh = () => setTick((t) => t + 1);
  const removal = useAction(() => location.assign('/agents'));

  useEffect(() => {
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const poll = async () => {
      clearTimeout(timer);
      try {
        const list = (await call('listAgentRuns', { params: { id }, query: { limit: 20 } })) as unknown as Run[];
        if (stopped) return;
        setRuns(list);
        setRunsError(undefined);
      } catch (err) {
        if (!stopped) setRunsError(describe(err));
      }
      // Runs started elsewhere (the API, the CLI, another tab) appear too: follow for as long as the page is seen,
      // faster while a run is unfinished; a hidden tab rests until it is shown again.
      if (!stopped && document.visibilityState === 'visible') timer = setTimeout(poll, POLL_MS);
    };
    const shown = () => {
      if (document.visibilityState === 'visible') void poll();
    };
    document.addEventListener('visibilitychange', shown);
    void poll();
    return () => {
      stopped = true;
      clearTimeout(timer);
      document.removeEventListener('visibilitychange', shown);
    };
  }, [id, tick]);

  if (agent.error) return <ErrorText error={agent.error} />;
  if (!agent.data) return <p aria-busy="true">Loading…</p>;
  return (
    <>
      <h1>{agent.data.name}</h1>
      <p class="actions">
        <DeleteButton
          label={agent.data.name}
          confirm={() => removal.act(() => call('deleteAgent', { params: { id } }), `Deleted ${agent.data!.name}.`)}
        />
      </p>
      <ErrorText error={removal.error} />
      <section aria-labelledby="run-title">
        <h2 id="run-title">Run the agent</h2>
        <Form
          submit="Run"
          reset
          onSubmit={async (f) => {
            await call('executeAgent', {
              params: { id },
              body: { goal: f.get('goal') as string, projectId: f.get('projectId') as string },
            });
            refresh();
          }}
        >
          <p class="field">
            <label for="run-project">Project</label>
            <select id="run-project" name="projectId" required>
              {projects.data?.map((p) => (
                <option value={p.id}>{p.name}</option>
              ))}
            </select>
          </p>
          <p class="field">
            <label for="run-goal">Goal</label>
            <textarea id="run-goal" name="goal" rows={2} required maxLength={10_000} />
          </p>
        </Form>
      </section>
      <section aria-labelledby="runs-title">
        <h2 id="runs-title">Runs</h2>
        <ErrorText error={runsError} />
        {runs.length === 0 ? (
          <p>No runs yet.</p>
        ) : (
          <ul class="runs">
            {runs.map((r) => (
              <RunView key={r.id} run={r} acted={refresh} />
            ))}
          </ul>
        )}
      </section>
      <section aria-labelledby="edit-title">
        <h2 id="edit-title">Settings</h2>
        <Form
          submit="Save agent"
          onSubmit={async (f) => {
            await call('updateAgent', { params: { id }, body: agentBody(f, choices.data, agent.data) as any });
            await agent.reload();
          }}
        >
          <AgentFields agent={agent.data} choices={choices.data} />
          <ErrorText error={choices.error} />
        </Form>
      </section>
    </>
  );
}
