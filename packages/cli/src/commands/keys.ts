/** API keys: list, get, create (shown once), update, rotate, revoke. They need a signed-in user, not a key. */
import { apiPath } from '../api';
import { addDelete, addGet, addList, addWrite } from '../resource';
import type { CommandModule } from '.';

export const keyCommands: CommandModule = (program, ctx) => {
  const keys = program
    .command('keys')
    .description('List, show, create, update, rotate and revoke API keys (needs a signed-in user, not a key)');
  addList(keys, ctx, {
    description: 'List API keys',
    path: () => '/api-keys',
    columns: [
      ['ID', 'id'],
      ['NAME', 'name'],
      ['KEY', (k) => `${k.start}…`],
      ['TYPE', 'type'],
      ['ENVIRONMENT', 'environment'],
      ['SCOPES', (k) => (k.scopes ?? []).join(',') || 'all'],
    ],
  });
  addGet(keys, ctx, { description: 'Show an API key (not the key itself)', path: ([id]) => apiPath`/api-keys/${id}` });
  addWrite(keys, ctx, {
    name: 'create <name>',
    description: 'Create an API key (shown once)',
    method: 'POST',
    path: () => '/api-keys',
    options: [
      ['-t, --type <type>', 'sdk (the default), cli, ci, integration or marketplace'],
      ['-e, --environment <env>', 'development (the default), staging or production'],
      ['-s, --scope <scope...>', 'limit the key to these scopes'],
      ['--expires-at <time>', 'ISO 8601: when it stops working'],
    ],
    body: ([name], o) => ({
      name,
      type: o.type ?? 'sdk',
      environment: o.environment ?? 'development',
      scopes: o.scope,
      expiresAt: o.expiresAt,
    }),
    human: (k) => `Created key ${k.id} (${k.name}). Copy it now, it is shown only once:\n${k.key}`,
  });
  addWrite(keys, ctx, {
    name: 'update <id>',
    description: 'Rename a key (its limits with --data \'{"limits":{...}}\')',
    method: 'PATCH',
    path: ([id]) => apiPath`/api-keys/${id}`,
    options: [['-n, --name <name>', 'new name']],
    body: (_, o) => ({ name: o.name }),
    human: (k) => `Updated key ${k.id} (${k.name}).`,
  });
  addWrite(keys, ctx, {
    name: 'rotate <id>',
    description: 'A new secret for a key (shown once); the old one works for the grace period',
    method: 'POST',
    path: ([id]) => apiPath`/api-keys/${id}/rotate`,
    options: [['--grace-period <seconds>', 'how long the old secret keeps working']],
    body: (_, o) => ({ gracePeriodSeconds: o.gracePeriod === undefined ? undefined : Number(o.gracePeriod) }),
    human: (k) => `Rotated key ${k.id}. Copy it now, it is shown only once:\n${k.key}`,
  });
  addDelete(keys, ctx, { verb: 'revoke', description: 'Revoke an API key', noun: 'key', path: ([id]) => apiPath`/api-keys/${id}` });
};
