// /agents/:id: edit the agent, run it in a project, and follow its runs: the list is read again every second while
// a run is unfinished, so steps appear without a reload; a run waiting for approval offers Approve and Reject, a
// queued or running one Cancel.
import { useEffect, useState } from 'preact/hooks';
import { api, describe, listAll, request } from '../api';
import { ErrorText, Form, useLoad, when } from '../ui';
import { AgentFields, agentBody, type Agent } from './agents';
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

const UNFINISHED = ['queued', 'running', 'requires_approval'];
const agentId = () => decodeURIComponent(location.pathname.split('/')[2] ?? '');

function RunView({ run, acted }: { run: Run; acted: () => void }) {
  const [error, setError] = useState<string>();
  const act = (verb: 'approve' | 'reject' | 'cancel') => async () => {
    try {
      await api('POST', `/agents/${agentId()}/runs/${run.id}/${verb}`, verb === 'reject' ? {} : undefined);
      setError(undefined);
      acted();
    } catch (err) {
      setError(describe(err));
    }
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
  const agent = useLoad(() => api<Agent>('GET', `/agents/${id}`), [id]);
  const projects = useLoad(() => listAll<Project>('/projects'), []);
  const [runs, setRuns] = useState<Run[]>([]);
  const [runsError, setRunsError] = useState<string>();
  const [tick, setTick] = useState(0);
  const refresh = () => setTick((t) => t + 1);

  useEffect(() => {
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const poll = async () => {
      try {
        const page = await request<Run[]>('GET', `/agents/${id}/runs?limit=20`);
        if (stopped) return;
        setRuns(page.data);
        setRunsError(undefined);
        // Follow while something is unfinished; otherwise rest until the next action.
        if (page.data.some((r) => UNFINISHED.includes(r.status))) timer = setTimeout(poll, 1000);
      } catch (err) {
        if (!stopped) setRunsError(describe(err));
      }
    };
    void poll();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, [id, tick]);

  if (agent.error) return <ErrorText error={agent.error} />;
  if (!agent.data) return <p aria-busy="true">Loading…</p>;
  return (
    <>
      <h1>{agent.data.name}</h1>
      <section aria-labelledby="run-title">
        <h2 id="run-title">Run the agent</h2>
        <Form
          submit="Run"
          reset
          onSubmit={async (f) => {
            await api('POST', `/agents/${id}/execute`, { goal: f.get('goal'), projectId: f.get('projectId') });
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
            await api('PATCH', `/agents/${id}`, agentBody(f));
            await agent.reload();
          }}
        >
          <AgentFields agent={agent.data} />
        </Form>
      </section>
    </>
  );
}
