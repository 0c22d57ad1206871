/** The tenant's secrets (values are write-only): list, get (no value), create, update, delete. */
import { readFileSync } from 'node:fs';
import { apiPath } from '../api';
import { addDelete, addGet, addList, addWrite } from '../resource';
import type { CommandModule } from '.';

/** `--value -` reads the value from stdin, so it stays out of the shell's history and the process list. */
const valueOf = (value?: string) => (value === '-' ? readFileSync(0, 'utf8').replace(/\r?\n$/, '') : value);
const secretPath = ([name]: string[]) => apiPath`/secrets/${name}`;
const valueOption: [string, string] = ['--value <value>', 'the value (- reads it from stdin)'];

export const secretCommands: CommandModule = (program, ctx) => {
  const secrets = program.command('secrets').description("The tenant's secrets: list, show (never the value), create, update, delete");
  addList(secrets, ctx, {
    description: 'List secrets',
    path: () => '/secrets',
    columns: [
      ['NAME', 'name'],
      ['VERSION', 'version'],
      ['DESCRIPTION', 'description'],
      ['UPDATED', 'updatedAt'],
    ],
  });
  addGet(secrets, ctx, { name: 'get <name>', description: 'Show a secret (not its value)', path: secretPath });
  addWrite(secrets, ctx, {
    name: 'create <name>',
    description: 'Create a secret',
    method: 'POST',
    path: () => '/secrets',
    options: [valueOption, ['-d, --description <text>', 'what it is for']],
    body: ([name], o) => ({ name, value: valueOf(o.value), description: o.description }),
    human: (s) => `Created secret ${s.name} (version ${s.version}).`,
  });
  addWrite(secrets, ctx, {
    name: 'update <name>',
    description: "Set a secret's value (a new version)",
    method: 'PUT',
    path: secretPath,
    options: [valueOption],
    body: (_, o) => ({ value: valueOf(o.value) }),
    human: (s) => `Updated secret ${s.name} (version ${s.version}).`,
  });
  addDelete(secrets, ctx, { name: 'delete <name>', description: 'Delete a secret', noun: 'secret', path: secretPath });
};
