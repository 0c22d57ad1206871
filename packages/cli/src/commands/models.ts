/** The tenant's model catalogue: list, get, create, update, delete (the rest of a model's fields with --data). */
import { apiPath } from '../api';
import { addDelete, addGet, addList, addWrite } from '../resource';
import type { CommandModule } from '.';

const modelOptions: Array<[string, string]> = [
  ['--provider <provider>', 'openai, anthropic, openai-compatible, azure-openai, gemini or bedrock'],
  ['--upstream-model <model>', "the provider's model name"],
  ['--provider-url <url>', "the provider's base URL"],
  ['--api-key-secret <name>', 'the secret holding the provider key'],
  ['--weight <n>', 'share of calls among models of the same name'],
];
const modelBody = (o: Record<string, any>) => ({
  provider: o.provider,
  upstreamModel: o.upstreamModel,
  baseUrl: o.providerUrl,
  apiKeySecret: o.apiKeySecret,
  weight: o.weight === undefined ? undefined : Number(o.weight),
});

export const modelCommands: CommandModule = (program, ctx) => {
  const models = program.command('models').description("The tenant's models: list, show, create, update, delete");
  addList(models, ctx, {
    description: 'List models',
    path: () => '/models',
    columns: [
      ['ID', 'id'],
      ['NAME', 'name'],
      ['PROVIDER', 'provider'],
      ['UPSTREAM', 'upstreamModel'],
      ['WEIGHT', 'weight'],
      ['ENABLED', 'enabled'],
    ],
  });
  addGet(models, ctx, { description: 'Show a model', path: ([id]) => apiPath`/models/${id}` });
  addWrite(models, ctx, {
    name: 'create <name>',
    description: 'Add a model (the name clients send as `model`)',
    method: 'POST',
    path: () => '/models',
    options: modelOptions,
    body: ([name], o) => ({ name, ...modelBody(o) }),
    human: (m) => `Created model ${m.id} (${m.name}).`,
  });
  addWrite(models, ctx, {
    name: 'update <id>',
    description: 'Change a model',
    method: 'PATCH',
    path: ([id]) => apiPath`/models/${id}`,
    options: [['-n, --name <name>', 'new name'], ...modelOptions],
    body: (_, o) => ({ name: o.name, ...modelBody(o) }),
    human: (m) => `Updated model ${m.id} (${m.name}).`,
  });
  addDelete(models, ctx, { description: 'Delete a model', noun: 'model', path: ([id]) => apiPath`/models/${id}` });
};
