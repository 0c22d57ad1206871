/** Usage: model calls, tokens and credits per hour or day, grouped as asked. */
import { rowsOf, table } from '../output';
import { act } from '../resource';
import type { CommandModule } from '.';

const DAY_MS = 86_400_000;

export const usageCommand: CommandModule = (program, ctx) => {
  program
    .command('usage')
    .description('Calls, tokens and credits per day (or hour), from the last 30 days unless --from')
    .option('--from <time>', 'ISO 8601: from (default: 30 days ago)')
    .option('--to <time>', 'ISO 8601: until, exclusive (default: now)')
    .option('--granularity <unit>', 'day or hour', 'day')
    .option('--group-by <fields>', 'comma-separated: model, apiKey, project, agent')
    .action(
      act(async (_, o) => {
        const c = ctx();
        const now = Date.now();
        const query = {
          from: o.from ?? new Date(now - 30 * DAY_MS).toISOString(),
          to: o.to ?? new Date(now).toISOString(),
          granularity: o.granularity,
          groupBy: o.groupBy,
        };
        const rows = await c.api().call<Array<Record<string, unknown>>>('GET', '/billing/usage', { query });
        const groups = ((o.groupBy as string | undefined) ?? '').split(',').filter(Boolean);
        const key = (g: string) => (g === 'apiKey' ? 'apiKeyId' : g === 'project' ? 'projectId' : g === 'agent' ? 'agentId' : g);
        c.print(rows, () =>
          table(
            rowsOf(
              [
                ['START', 'start'],
                ...groups.map((g): [string, string] => [g.toUpperCase(), key(g)]),
                ['CALLS', 'calls'],
                ['INPUT', 'inputTokens'],
                ['OUTPUT', 'outputTokens'],
                ['CREDITS', 'credits'],
              ],
              rows,
            ),
          ),
        );
      }),
    );
};
