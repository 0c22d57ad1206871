/** Agents (list, get, create, update, delete) and their runs: start one (`run --follow`), follow, approve, reject, cancel. */
import type { Command } from 'commander';
import { apiPath, type Run } from '../api';
import { UsageError, type Context } from '../context';
import { askYes } from '../prompt';
import { act, addDelete, addGet, addList, addWrite, type Ctx } from '../resource';
import type { CommandModule } from '.';

type Step = Run['steps'][number];
const runPath = (agentId: string, runId: string) => apiPath`/agents/${agentId}/runs/${runId}`;

function describeStep(s: Step): string {
  if (s.type === 'model') return `• model: ${(s.text ?? '').trim() || '(tool calls)'}`;
  const args = s.arguments === undefined ? '' : ` ${JSON.stringify(s.arguments)}`;
  const result = s.result === undefined || s.result === null ? '' : ` -> ${JSON.stringify(s.result)}`;
  const error = s.error ? ` (${s.error})` : '';
  return `• tool ${s.toolName ?? s.tool}${args}: ${s.status}${result}${error}`;
}

/** Follows a run, printing each step once as it appears or changes, and the end; answers the last run seen. */
async function follow(c: Context, agentId: string, runId: string, decide: 'approve' | 'reject' | 'ask' | 'stop'): Promise<Run> {
  const api = c.api();
  const printed = new Map<number, string>();
  for (;;) {
    let last: Run | undefined;
    for await (const run of api.followRun(agentId, runId)) {
      last = run;
      for (const s of run.steps) {
        const line = describeStep(s);
        if (printed.get(s.index) === line) continue;
        printed.set(s.index, line);
        if (c.json) c.out(JSON.stringify({ event: 'step', step: s }));
        else c.out(line);
      }
    }
    const run = last!;
    if (run.status !== 'requires_approval') return run;
    let choice = decide;
    if (choice === 'ask' && !process.stdin.isTTY) choice = 'stop';
    if (choice === 'ask') choice = (await askYes('The agent waits for approval of this tool call. Approve?')) ? 'approve' : 'reject';
    if (choice === 'stop') return run;
    if (choice === 'approve') await api.call('POST', `${runPath(agentId, runId)}/approve`);
    else await api.call('POST', `${runPath(agentId, runId)}/reject`, { body: { reason: 'rejected from the CLI' } });
  }
}

function describeEnd(run: Run): string {
  if (run.status === 'completed') return `Completed.\n${run.output ?? ''}`.trimEnd();
  if (run.status === 'requires_approval')
    return `Waiting for approval. Approve with: svc agents approve ${run.agentId} ${run.id} (or reject)`;
  return `Run ${run.status}${run.error ? `: ${run.error}` : ''}.`;
}

/** The run's end: with --json one more JSON line (a followed run prints one JSON object per line). */
function printRunEnd(c: Context, run: Run): void {
  c.out(c.json ? JSON.stringify({ event: 'run', run }) : describeEnd(run));
  if (run.status === 'failed' || run.status === 'cancelled') process.exitCode = 1;
}

const agentOptions: Array<[string, string]> = [
  ['-p, --prompt <text>', 'system prompt'],
  ['-a, --autonomy <level>', 'manual, supervised (the default) or autonomous'],
];
const agentBody = (o: Record<string, any>) => ({
  systemPrompt: o.prompt,
  config: o.autonomy ? { autonomyLevel: o.autonomy } : undefined,
});

function runCommands(agents: Command, ctx: Ctx): void {
  agents
    .command('run <agentId>')
    .description('Run an agent on a project; --follow shows its steps and output as they come')
    .requiredOption('--project <id>', 'the project it works on')
    .requiredOption('-g, --goal <text>', 'what it should do')
    .option('-f, --follow', 'show steps as they come, until the run ends')
    .option('--approve', 'with --follow: approve every tool call that waits for approval')
    .option('--reject', 'with --follow: reject every tool call that waits for approval')
    .action(async (agentId: string, o: { project: string; goal: string; follow?: boolean; approve?: boolean; reject?: boolean }) => {
      const c = ctx();
      if (o.approve && o.reject) throw new UsageError('--approve and --reject cannot both be given');
      const run = await c.api().call<Run>('POST', apiPath`/agents/${agentId}/execute`, { body: { goal: o.goal, projectId: o.project } });
      if (!o.follow)
        return c.print(run, () => `Started run ${run.id} (${run.status}). Follow it with: svc agents follow ${agentId} ${run.id}`);
      if (!c.json) c.out(`Run ${run.id} started.`);
      printRunEnd(c, await follow(c, agentId, run.id, o.approve ? 'approve' : o.reject ? 'reject' : 'ask'));
    });
  agents
    .command('follow <agentId> <runId>')
    .description('Follow a run: its steps and output as they come')
    .action(async (agentId: string, runId: string) => printRunEnd(ctx(), await follow(ctx(), agentId, runId, 'stop')));
  for (const verb of ['approve', 'reject', 'cancel'] as const) {
    const command = agents
      .command(`${verb} <agentId> <runId>`)
      .description(verb === 'cancel' ? 'Cancel a run' : `${verb === 'approve' ? 'Approve' : 'Reject'} the tool call a run waits on`);
    if (verb === 'reject') command.option('-r, --reason <text>', 'why');
    command.action(
      act(async ([agentId, runId], o) => {
        const c = ctx();
        const body = verb === 'reject' ? { reason: o.reason } : undefined;
        const run = await c.api().call<Run>('POST', `${runPath(agentId, runId)}/${verb}`, { body });
        c.print(run, () => `Run ${run.id}: ${run.status}.`);
      }),
    );
  }
  const runs = agents.command('runs').description("An agent's runs");
  addList(runs, ctx, {
    name: 'list <agentId>',
    description: "List an agent's runs, newest first",
    path: ([agentId]) => apiPath`/agents/${agentId}/runs`,
    columns: [
      ['ID', 'id'],
      ['STATUS', 'status'],
      ['PROJECT', 'projectId'],
      ['GOAL', 'goal'],
      ['CREATED', 'createdAt'],
    ],
  });
  addGet(runs, ctx, { name: 'get <agentId> <runId>', description: 'Show a run and its steps', path: ([a, r]) => runPath(a, r) });
}

export const agentCommands: CommandModule = (program, ctx) => {
  const agents = program.command('agents').description('List, show, create, update and delete agents; run them and follow their runs');
  addList(agents, ctx, {
    description: 'List agents',
    path: () => '/agents',
    columns: [
      ['ID', 'id'],
      ['NAME', 'name'],
      ['AUTONOMY', (a) => a.config?.autonomyLevel],
    ],
  });
  addGet(agents, ctx, { description: 'Show an agent', path: ([id]) => apiPath`/agents/${id}` });
  addWrite(agents, ctx, {
    name: 'create <name>',
    description: 'Create an agent',
    method: 'POST',
    path: () => '/agents',
    options: agentOptions,
    body: ([name], o) => ({ name, ...agentBody(o) }),
    human: (a) => `Created agent ${a.id} (${a.name}).`,
  });
  addWrite(agents, ctx, {
    name: 'update <id>',
    description: 'Change an agent',
    method: 'PATCH',
    path: ([id]) => apiPath`/agents/${id}`,
    options: [['-n, --name <name>', 'new name'], ...agentOptions],
    body: (_, o) => ({ name: o.name, ...agentBody(o) }),
    human: (a) => `Updated agent ${a.id} (${a.name}).`,
  });
  addDelete(agents, ctx, { description: 'Delete an agent', noun: 'agent', path: ([id]) => apiPath`/agents/${id}` });
  runCommands(agents, ctx);
};
