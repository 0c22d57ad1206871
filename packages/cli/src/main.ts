/**
 * `svc`, the command-line client. Exit codes (CONTRACT.md 7): 0 success, 1 an API or usage error, 2 bad arguments.
 */
import { Command, CommanderError } from 'commander';
import { COMMAND_MODULES } from './commands';
import { contextOf, describeError, VERSION, type Context, type GlobalOptions } from './context';

/** Every command of the tree, the program's own included. */
const everyCommand = (c: Command): Command[] => [c, ...c.commands.flatMap(everyCommand)];

export function buildProgram(env: NodeJS.ProcessEnv): Command {
  const program = new Command('svc')
    .description('The svc platform from your terminal')
    .version(VERSION)
    .option('--base-url <url>', "the service address (default: SVC_BASE_URL, the profile's login, or http://127.0.0.1:8080)")
    .option('--profile <name>', 'which saved login to use (default: SVC_PROFILE, else "default")')
    .option('--json', 'print JSON');
  const ctx = (): Context => contextOf(program.opts<GlobalOptions>(), env);
  for (const register of COMMAND_MODULES) register(program, ctx);
  for (const c of everyCommand(program)) c.exitOverride().showHelpAfterError();
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
