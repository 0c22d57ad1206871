/** Projects: list, get, create, update, delete. */
import { apiPath } from '../api';
import { addDelete, addGet, addList, addWrite } from '../resource';
import type { CommandModule } from '.';

const projectOptions: Array<[string, string]> = [
  ['-d, --description <text>', 'description'],
  ['-l, --language <language>', 'main language'],
];

export const projectCommands: CommandModule = (program, ctx) => {
  const projects = program.command('projects').description('List, show, create, update and delete projects');
  addList(projects, ctx, {
    description: 'List projects',
    path: () => '/projects',
    columns: [
      ['ID', 'id'],
      ['NAME', 'name'],
      ['LANGUAGE', 'language'],
      ['UPDATED', 'updated_at'],
    ],
  });
  addGet(projects, ctx, { description: 'Show a project', path: ([id]) => apiPath`/projects/${id}` });
  addWrite(projects, ctx, {
    name: 'create <name>',
    description: 'Create a project',
    method: 'POST',
    path: () => '/projects',
    options: projectOptions,
    body: ([name], o) => ({ name, description: o.description, language: o.language }),
    human: (p) => `Created project ${p.id} (${p.name}).`,
  });
  addWrite(projects, ctx, {
    name: 'update <id>',
    description: 'Change a project',
    method: 'PATCH',
    path: ([id]) => apiPath`/projects/${id}`,
    options: [['-n, --name <name>', 'new name'], ...projectOptions],
    body: (_, o) => ({ name: o.name, description: o.description, language: o.language }),
    human: (p) => `Updated project ${p.id} (${p.name}).`,
  });
  addDelete(projects, ctx, { description: 'Delete a project', noun: 'project', path: ([id]) => apiPath`/projects/${id}` });
};
