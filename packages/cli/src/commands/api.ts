/** `svc api METHOD PATH`: any call of the API, for what no command covers; prints the whole answer. */
import { Argument, InvalidArgumentError } from 'commander';
import { confirm } from '../prompt';
import { readData } from '../resource';
import type { CommandModule } from '.';

const METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'];

export const apiCommand: CommandModule = (program, ctx) => {
  program
    .command('api')
    .description('Call any endpoint: svc api GET /projects (paths are under /api/v1 unless they start with /api/ or /v1/)')
    .addArgument(
      new Argument('<method>', `HTTP method: ${METHODS.join(', ')}`).argParser((m) => {
        if (!METHODS.includes(m.toUpperCase())) throw new InvalidArgumentError(`one of ${METHODS.join(', ')}`);
        return m.toUpperCase();
      }),
    )
    .argument('<path>', 'the path, with a query if any: /events?type=project.created')
    .option('-d, --data <json>', 'the body as JSON (or @file, @- for stdin)')
    .option('-y, --yes', 'a DELETE without asking')
    .action(async (method: string, path: string, o: { data?: string; yes?: boolean }) => {
      const c = ctx();
      // A raw DELETE asks first, as every delete command does.
      if (method === 'DELETE') await confirm(`DELETE ${path}`, Boolean(o.yes), 'Pass --yes to send it.');
      const answer = await c.api().raw(method, path, { body: o.data ? readData(o.data) : undefined });
      c.out(typeof answer === 'string' ? answer : JSON.stringify(answer ?? null, null, 2));
    });
};
