/** `svc completion bash|zsh|fish`: prints the shell's completion script for every command. */
import { Argument } from 'commander';
import { completionScript, SHELLS, type Shell } from '../completion';
import type { CommandModule } from '.';

export const completionCommand: CommandModule = (program) => {
  program
    .command('completion')
    .description('Print a shell completion script (bash: source <(svc completion bash); fish: svc completion fish | source)')
    .addArgument(new Argument('<shell>', 'the shell').choices(SHELLS))
    .action((shell: Shell) => void process.stdout.write(completionScript(program, shell)));
};
