/**
 * `svc`, the command-line client. Exit codes (CONTRACT.md 7): 0 success, 1 an API or usage error, 2 bad arguments.
 */
import { Command, CommanderError } from 'commander';
import { agentCommands, chatCommand, keyCommands, listenCommand, projectCommands } from './commands';
import { contextOf, describeError, VERSION, type Context, type GlobalOptions } from './context';
import { loginWithApiKey, loginWithBrowser, logout } from './login';

export function buildProgram(env: NodeJS.ProcessEnv): Command {
  const program = new Command('svc')
    .description('The svc platform from your terminal')
    .version(VERSION)
    .option('--base-url <url>', 'the service address (default: SVC_BASE_URL, the saved login, or http://127.0.0.1:8080)')
    .option('--json', 'print JSON')
    .showHelpAfterError()
    .exitOverride();
  const ctx = (): Context => contextOf(program.opts<GlobalOptions>(), env);

  program
    .command('login')
    .description('Sign in through the browser (or with an API key)')
    .option('--api-key <key>', 'sign in with an API key instead (or set SVC_API_KEY)')
    .action(async (o: { apiKey?: string }) => {
      const key = o.apiKey ?? env.SVC_API_KEY;
      if (key) await loginWithApiKey(ctx(), key);
      else await loginWithBrowser(ctx());
    });
  program
    .command('logout')
    .description('Sign out and forget the saved credentials')
    .action(() => logout(ctx()));
  program
    .command('whoami')
    .description('Who you are signed in as')
    .action(async () => {
      const c = ctx();
      const me = await c.client().me();
      c.print(me, () => `${me.user.email} (tenant ${me.tenant.name}, role ${me.role}, signed in with ${me.credential.type})`);
    });
  projectCommands(program, ctx);
  agentCommands(program, ctx);
  chatCommand(program, ctx);
  keyCommands(program, ctx);
  listenCommand(program, ctx);
  for (const c of program.commands) c.exitOverride().showHelpAfterError();
  for (const c of program.commands.flatMap((c) => c.commands)) c.exitOverride().showHelpAfterError();
  return program;
}

export async function run(argv: string[], env: NodeJS.ProcessEnv): Promise<number> {
  const program = buildProgram(env);
  try {
    await program.parseAsync(argv);
    return typeof process.exitCode === 'number' ? process.exitCode : 0;
  } catch (err) {
    if (err instanceof CommanderError) {
      // Help and version end well; anything commander refused is a bad argument.
      return err.code === 'commander.helpDisplayed' || err.code === 'commander.version' || err.code === 'commander.help' ? 0 : 2;
    }
    process.stderr.write(`${describeError(err)}\n`);
    return 1;
  }
}
