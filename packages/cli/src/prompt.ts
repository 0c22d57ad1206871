/** Questions on the terminal: a yes/no, and the confirmation every delete asks for. */
import { createInterface } from 'node:readline/promises';
import { UsageError } from './context';

/** Asks on stderr (stdout stays the command's output) and answers whether the reply was yes. */
export async function askYes(question: string): Promise<boolean> {
  const rl = createInterface({ input: process.stdin, output: process.stderr });
  try {
    return /^y(es)?$/i.test((await rl.question(`${question} [y/N] `)).trim());
  } finally {
    rl.close();
  }
}

/**
 * Goes on only when confirmed: by `yes` (--yes), or by a yes typed on the terminal. Without a terminal to ask on it
 * refuses rather than guess, so a script never deletes by accident.
 */
export async function confirm(question: string, yes: boolean, howToSkip: string): Promise<void> {
  if (yes) return;
  if (!process.stdin.isTTY) throw new UsageError(`${question}? Not confirmed: stdin is not a terminal. ${howToSkip}`);
  if (!(await askYes(`${question}?`))) throw new UsageError('Cancelled: nothing was changed.');
}
