/** The resource commands: projects, agents (with run --follow), chat, keys. Each prints JSON with --json. */
import { createInterface } from 'node:readline/promises';
import type { Command } from 'commander';
import type { Output } from '@svc/sdk';
import { UsageError, type Context } from './context';
export { listenCommand } from './commands/listen';

type Run = Output<'getAgentRun'>;
type Step = Run['steps'][number];

const table = (rows: string[][]) => {
  if (!rows.length) return '(none)';
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  return rows
    .map((r) =>
      r
        .map((c, i) => c.padEnd(widths[i]))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
};

export function projectCommands(program: Command, ctx: () => Context): void {
  const projects = program.command('projects').description('List, create, show and delete projects');
  projects
    .command('list', { isDefault: true })
    .description('List projects')
    .action(async () => {
      const c = ctx();
      const items = await c.client().listProjects({ query: { limit: 100 } });
      c.print(items, () =>
        table([['ID', 'NAME', 'LANGUAGE', 'UPDATED'], ...items.map((p) => [p.id, p.name, p.language ?? '', p.updated_at])]),
      );
    });
  projects
    .command('create <name>')
    .description('Create a project')
    .option('-d, --description <text>', 'description')
    .option('-l, --language <language>', 'main language')
    .action(async (name: string, o: { description?: string; language?: string }) => {
      const c = ctx();
      const p = await c.client().createProject({ body: { name, description: o.description, language: o.language } });
      c.print(p, () => `Created project ${p.id} (${p.name}).`);
    });
  projects
    .command('get <id>')
    .description('Show a project')
    .action(async (id: string) => {
      const c = ctx();
      const p = await c.client().getProject({ params: { id } });
      c.print(p, () => `${p.id}  ${p.name}\n${p.description ?? ''}`.trimEnd());
    });
  projects
    .command('delete <id>')
    .description('Delete a project')
    .action(async (id: string) => {
      const c = ctx();
      const res = await c.client().deleteProject({ params: { id } });
      c.print(res, () => `Deleted project ${id}.`);
    });
}

function describeStep(s: Step): string {
  if (s.type === 'model') return `• model: ${(s.text ?? '').trim() || '(tool calls)'}`;
  const args = s.arguments === undefined ? '' : ` ${JSON.stringify(s.arguments)}`;
  const result = s.result === undefined || s.result === null ? '' : ` -> ${JSON.stringify(s.result)}`;
  const error = s.error ? ` (${s.error})` : '';
  return `• tool ${s.toolName ?? s.tool}${args}: ${s.status}${result}${error}`;
}

/** Follows a run, printing each step once as it appears or changes, and the end; answers the last run seen. */
async function follow(c: Context, agentId: string, runId: string, decide: 'approve' | 'reject' | 'ask' | 'stop'): Promise<Run> {
  const client = c.client();
  const printed = new Map<number, string>();
  for (;;) {
    let last: Run | undefined;
    for await (const run of client.followRun(agentId, runId, { intervalMs: 300, untilApproval: true })) {
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
    if (choice === 'ask') {
      const rl = createInterface({ input: process.stdin, output: process.stdout });
      const answer = (await rl.question('The agent waits for approval of this tool call. Approve? [y/N] ')).trim().toLowerCase();
      rl.close();
      choice = answer === 'y' || answer === 'yes' ? 'approve' : 'reject';
    }
    if (choice === 'stop') return run;
    if (choice === 'approve') await client.approveAgentRun({ params: { id: agentId, run_id: runId } });
    else await client.rejectAgentRun({ params: { id: agentId, run_id: runId }, body: { reason: 'rejected from the CLI' } });
  }
}

function printRunEnd(c: Context, run: Run): void {
  c.print(run, () => {
    if (run.status === 'completed') return `Completed.\n${run.output ?? ''}`.trimEnd();
    if (run.status === 'requires_approval')
      return `Waiting for approval. Approve with: svc agents approve ${run.agentId} ${run.id} (or reject)`;
    return `Run ${run.status}${run.error ? `: ${run.error}` : ''}.`;
  });
  if (run.status === 'failed' || run.status === 'cancelled') process.exitCode = 1;
}

export function agentCommands(program: Command, ctx: () => Context): void {
  const agents = program.command('agents').description('List and create agents, run them and follow their runs');
  agents
    .command('list', { isDefault: true })
    .description('List agents')
    .action(async () => {
      const c = ctx();
      const items = await c.client().listAgents({ query: { limit: 100 } });
      c.print(items, () => table([['ID', 'NAME', 'AUTONOMY'], ...items.map((a) => [a.id, a.name, String(a.config.autonomyLevel)])]));
    });
  agents
    .command('create <name>')
    .description('Create an agent')
    .requiredOption('-p, --prompt <text>', 'system prompt')
    .option('-a, --autonomy <level>', 'manual, supervised or autonomous', 'supervised')
    .action(async (name: string, o: { prompt: string; autonomy: string }) => {
      const c = ctx();
      const a = await c.client().createAgent({ body: { name, systemPrompt: o.prompt, config: { autonomyLevel: o.autonomy as never } } });
      c.print(a, () => `Created agent ${a.id} (${a.name}).`);
    });
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
      const run = await c.client().executeAgent({ params: { id: agentId }, body: { goal: o.goal, projectId: o.project } });
      if (!o.follow)
        return c.print(run, () => `Started run ${run.id} (${run.status}). Follow it with: svc agents follow ${agentId} ${run.id}`);
      if (!c.json) c.out(`Run ${run.id} started.`);
      printRunEnd(c, await follow(c, agentId, run.id, o.approve ? 'approve' : o.reject ? 'reject' : 'ask'));
    });
  agents
    .command('follow <agentId> <runId>')
    .description('Follow a run: its steps and output as they come')
    .action(async (agentId: string, runId: string) => printRunEnd(ctx(), await follow(ctx(), agentId, runId, 'stop')));
  for (const verb of ['approve', 'reject'] as const)
    agents
      .command(`${verb} <agentId> <runId>`)
      .description(`${verb === 'approve' ? 'Approve' : 'Reject'} the tool call a run waits on`)
      .option('-r, --reason <text>', 'why (reject)')
      .action(async (agentId: string, runId: string, o: { reason?: string }) => {
        const c = ctx();
        const params = { id: agentId, run_id: runId };
        const run =
          verb === 'approve'
            ? await c.client().approveAgentRun({ params })
            : await c.client().rejectAgentRun({ params, body: { reason: o.reason } });
        c.print(run, () => `Run ${run.id}: ${run.status}.`);
      });
  agents
    .command('cancel <agentId> <runId>')
    .description('Cancel a run')
    .action(async (agentId: string, runId: string) => {
      const c = ctx();
      const run = await c.client().cancelAgentRun({ params: { id: agentId, run_id: runId } });
      c.print(run, () => `Run ${run.id}: ${run.status}.`);
    });
}

export function chatCommand(program: Command, ctx: () => Context): void {
  program
    .command('chat <message...>')
    .description('Send a message and stream the reply as it comes (a new session unless --session)')
    .option('-s, --session <id>', 'continue this chat session')
    .action(async (words: string[], o: { session?: string }) => {
      const c = ctx();
      const client = c.client();
      const content = words.join(' ');
      const sessionId = o.session ?? (await client.createChatSession({ body: { title: content.slice(0, 80) } })).id;
      await client.sendChatMessage({ params: { id: sessionId }, body: { content } });
      let text = '';
      for await (const e of client.streamChatReply(sessionId)) {
        if (e.type === 'delta') {
          text += e.delta;
          if (c.json) c.out(JSON.stringify({ event: 'delta', delta: e.delta }));
          else process.stdout.write(e.delta);
        } else if (e.type === 'completed') {
          if (c.json) c.out(JSON.stringify({ event: 'completed', sessionId, message: e.message }));
          else process.stdout.write(text.endsWith('\n') ? '' : '\n');
        } else {
          if (!c.json) process.stdout.write('\n');
          throw new UsageError(`The reply failed: ${e.message} [${e.code}]`);
        }
      }
      if (!c.json && !o.session) process.stderr.write(`(session ${sessionId}: continue with --session ${sessionId})\n`);
    });
}

export function keyCommands(program: Command, ctx: () => Context): void {
  const keys = program.command('keys').description('List, create and revoke API keys (needs a signed-in user, not a key)');
  keys
    .command('list', { isDefault: true })
    .description('List API keys')
    .action(async () => {
      const c = ctx();
      const items = await c.client().listApiKeys({ query: { limit: 100 } });
      c.print(items, () =>
        table([
          ['ID', 'NAME', 'KEY', 'TYPE', 'ENVIRONMENT', 'SCOPES'],
          ...items.map((k) => [k.id, k.name, `${k.start}…`, k.type, k.environment, (k.scopes ?? []).join(',') || 'all']),
        ]),
      );
    });
  keys
    .command('create <name>')
    .description('Create an API key (shown once)')
    .option('-t, --type <type>', 'sdk, cli, ci, integration or marketplace', 'sdk')
    .option('-e, --environment <env>', 'development, staging or production', 'development')
    .option('-s, --scope <scope...>', 'limit the key to these scopes')
    .action(async (name: string, o: { type: string; environment: string; scope?: string[] }) => {
      const c = ctx();
      const k = await c.client().createApiKey({
        body: { name, type: o.type as never, environment: o.environment as never, ...(o.scope ? { scopes: o.scope as never } : {}) },
      });
      c.print(k, () => `Created key ${k.id} (${k.name}). Copy it now, it is shown only once:\n${k.key}`);
    });
  keys
    .command('revoke <id>')
    .description('Revoke an API key')
    .action(async (id: string) => {
      const c = ctx();
      const res = await c.client().revokeApiKey({ params: { id } });
      c.print(res, () => `Revoked key ${id}.`);
    });
}
