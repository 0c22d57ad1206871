/** The request log: every model call with its tokens, credits and latency; list (filtered) and get. */
import { apiPath } from '../api';
import { addGet, addList } from '../resource';
import type { CommandModule } from '.';

export const requestCommands: CommandModule = (program, ctx) => {
  const requests = program.command('requests').description('The request log: model calls, their tokens, credits and latency');
  addList(requests, ctx, {
    description: 'List logged requests, newest first',
    path: () => '/requests',
    filters: [
      ['--from <time>', 'from', 'ISO 8601: at or after it'],
      ['--to <time>', 'to', 'ISO 8601: before it'],
      ['--model <name>', 'model', 'only this model'],
      ['--api-key <id>', 'apiKeyId', 'only calls made with this key'],
      ['--source <source>', 'source', 'only calls from this source (e.g. chat, agent, v1)'],
      ['--status <status>', 'status', 'only this status'],
    ],
    columns: [
      ['ID', 'id'],
      ['AT', 'at'],
      ['SOURCE', 'source'],
      ['MODEL', 'model'],
      ['STATUS', 'status'],
      ['TOKENS', (r) => `${r.inputTokens ?? 0}/${r.outputTokens ?? 0}`],
      ['CREDITS', 'credits'],
      ['MS', 'latencyMs'],
    ],
  });
  addGet(requests, ctx, { description: 'Show one logged request', path: ([id]) => apiPath`/requests/${id}` });
};
