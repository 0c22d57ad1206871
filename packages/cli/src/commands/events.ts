/** The tenant's event log: list (filtered), get, and the event types there are. */
import { apiPath } from '../api';
import { table } from '../output';
import { addGet, addList } from '../resource';
import type { CommandModule } from '.';

export const eventCommands: CommandModule = (program, ctx) => {
  const events = program.command('events').description("The tenant's events: list, show, and the types there are");
  addList(events, ctx, {
    description: 'List events, newest first',
    path: () => '/events',
    filters: [
      ['--type <type>', 'type', 'only this type'],
      ['--after <time>', 'after', 'ISO 8601: created after it'],
      ['--before <time>', 'before', 'ISO 8601: created before it'],
      ['--webhook <id>', 'webhookId', 'only events delivered to this endpoint'],
      ['--delivery-failed <bool>', 'deliveryFailed', 'true: only events with a failed delivery'],
    ],
    columns: [
      ['ID', 'id'],
      ['TYPE', 'type'],
      ['CREATED', 'createdAt'],
    ],
  });
  addGet(events, ctx, { description: 'Show an event and its data', path: ([id]) => apiPath`/events/${id}` });
  events
    .command('types')
    .description('The event types there are')
    .action(async () => {
      const c = ctx();
      const types = await c.api().call<Array<{ type: string; description: string }>>('GET', '/event-types');
      c.print(types, () => table([['TYPE', 'DESCRIPTION'], ...types.map((t) => [t.type, t.description])]));
    });
};
