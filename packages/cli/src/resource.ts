/**
 * The shapes most resource commands share, so each resource's file says only what is its own: `list` (pages through
 * the API's cursor: `--limit N`, `--all`), `get`, `create` / `update` (flags, or any body with `--data JSON|@file`)
 * and `delete` (asks first; `--yes` skips it).
 */
import { readFileSync } from 'node:fs';
import { InvalidArgumentError, type Command } from 'commander';
import type { Api, Page, RequestOptions } from './api';
import { UsageError, type Context } from './context';
import { fields, rowsOf, table, type Column } from './output';
import { confirm } from './prompt';

export type Ctx = () => Context;
type Options = Record<string, any>;
/** An action of positional arguments (as commander parsed them) and options. */
type Action = (args: any[], o: Options) => Promise<void>;

/** Wraps an action for commander, which passes the arguments, then the options, then the command. */
export function act(action: Action) {
  return (...received: unknown[]) => {
    const command = received[received.length - 1] as Command;
    return action(command.processedArgs as any[], command.opts());
  };
}

/** Drops the fields left undefined (flags not given). */
export const defined = (record: Options): Options => Object.fromEntries(Object.entries(record).filter(([, v]) => v !== undefined));

const positiveInt = (value: string): number => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError('a whole number, 1 or more');
  return n;
};

/** `--data`: JSON given inline, or `@file` (`@-` reads stdin). */
export function readData(value: string): Options {
  const text = value === '@-' ? readFileSync(0, 'utf8') : value.startsWith('@') ? readFileSync(value.slice(1), 'utf8') : value;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw new UsageError(`--data is not JSON: ${(err as Error).message}`);
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new UsageError('--data must be a JSON object');
  return parsed as Options;
}

export interface Listing<T> {
  items: T[];
  /** The API has more past the last item (not all asked for). */
  more: boolean;
}

/** Up to `limit` items (every item with `all`), page after page through the API's cursor (pages of at most 100). */
export async function collect<T = any>(
  api: Api,
  path: string,
  query: RequestOptions['query'],
  want: { limit: number; all?: boolean },
): Promise<Listing<T>> {
  const items: T[] = [];
  let cursor: string | null = null;
  do {
    const page: Page<T> = await api.page<T>(path, query, cursor, want.all ? 100 : Math.min(100, want.limit - items.length));
    items.push(...page.items);
    cursor = page.nextCursor;
  } while (cursor && (want.all || items.length < want.limit));
  return { items, more: cursor !== null };
}

/** Prints a list: the items as JSON, or a table with a hint on stderr when more are left. */
export function printList<T>(c: Context, listing: Listing<T>, columns: Column<T>[]): void {
  c.print(listing.items, () => table(rowsOf(columns, listing.items)));
  if (listing.more && !c.json) process.stderr.write(`(more: --limit N for more, --all for every one)\n`);
}

export interface ListSpec<T = any> {
  /** `list`, or e.g. `runs <agentId>`. */
  name?: string;
  description: string;
  path: (args: string[]) => string;
  columns: Column<T>[];
  /** Query filters: [flags, query parameter, description]. */
  filters?: Array<[flags: string, query: string, description: string]>;
  isDefault?: boolean;
}

export function addList<T = any>(parent: Command, ctx: Ctx, spec: ListSpec<T>): Command {
  const command = parent
    .command(spec.name ?? 'list', { isDefault: spec.isDefault ?? true })
    .description(spec.description)
    .option('--limit <n>', 'at most this many (pages through the API)', positiveInt, 100)
    .option('--all', 'every one, page after page');
  for (const [flags, , description] of spec.filters ?? []) command.option(flags, description);
  return command.action(
    act(async (args, o) => {
      const c = ctx();
      const query = Object.fromEntries(
        (spec.filters ?? []).map(([flags, name]) => [name, o[optionKey(flags)] as string | undefined]).filter(([, v]) => v !== undefined),
      );
      printList(c, await collect<T>(c.api(), spec.path(args), query, { limit: o.limit, all: o.all }), spec.columns);
    }),
  );
}

/** The attribute commander keeps a flag's value under: `--api-key <id>` -> apiKey. */
const optionKey = (flags: string) =>
  flags
    .split(/[ ,|]+/)
    .find((f) => f.startsWith('--'))!
    .slice(2)
    .replace(/-([a-z])/g, (_, ch: string) => ch.toUpperCase());

export function addGet(parent: Command, ctx: Ctx, spec: { name?: string; description: string; path: (args: string[]) => string }): Command {
  return parent
    .command(spec.name ?? 'get <id>')
    .description(spec.description)
    .action(
      act(async (args) => {
        const c = ctx();
        const record = await c.api().call('GET', spec.path(args));
        c.print(record, () => fields(record));
      }),
    );
}

export interface WriteSpec {
  name: string;
  description: string;
  method: 'POST' | 'PATCH' | 'PUT';
  path: (args: string[]) => string;
  /** [flags, description] of the command's own options. */
  options?: Array<[flags: string, description: string]>;
  /** The body from the arguments and options (`--data` is merged under it); undefined: the call has none. */
  body: (args: any[], o: Options) => Options | undefined;
  human: (record: any) => string;
}

export function addWrite(parent: Command, ctx: Ctx, spec: WriteSpec): Command {
  const command = parent.command(spec.name).description(spec.description);
  for (const [flags, description] of spec.options ?? []) command.option(flags, description);
  return command.option('--data <json>', 'more of the body as JSON (or @file, @- for stdin)').action(
    act(async (args, o) => {
      const c = ctx();
      const own = spec.body(args, o);
      const body = own === undefined && !o.data ? undefined : { ...(o.data ? readData(o.data as string) : {}), ...defined(own ?? {}) };
      const record = await c.api().call(spec.method, spec.path(args), { body });
      c.print(record, () => spec.human(record));
    }),
  );
}

export interface DeleteSpec {
  name?: string;
  description: string;
  /** What it deletes, for the question: `project`. */
  noun: string;
  verb?: string;
  path: (args: string[]) => string;
}

export function addDelete(parent: Command, ctx: Ctx, spec: DeleteSpec): Command {
  const verb = spec.verb ?? 'delete';
  return parent
    .command(spec.name ?? `${verb} <id>`)
    .description(spec.description)
    .option('-y, --yes', `${verb} without asking`)
    .action(
      act(async (args, o) => {
        const c = ctx();
        const target = `${spec.noun} ${args.join(' ')}`;
        const Verb = `${verb[0].toUpperCase()}${verb.slice(1)}`;
        await confirm(`${Verb} ${target}`, Boolean(o.yes), `Pass --yes to ${verb} it.`);
        const res = await c.api().call('DELETE', spec.path(args));
        c.print(res ?? { id: args[0], deleted: true }, () => `${Verb}d ${target}.`);
      }),
    );
}
