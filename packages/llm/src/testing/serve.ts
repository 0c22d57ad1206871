/**
 * Runs both fake providers as a standalone process, for manual runs, end-to-end setups and benchmarks:
 *
 *   node --import tsx packages/llm/src/testing/serve.ts [--host 127.0.0.1] [--openai-port 0] [--anthropic-port 0] [--api-key KEY]
 *
 * Prints one JSON line with both base URLs, then serves the default echo reply until SIGINT or SIGTERM.
 */
import { startFakeAnthropic } from './fake-anthropic';
import { startFakeOpenAI } from './fake-openai';

function flag(args: string[], name: string): string | undefined {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : undefined;
}

function port(value: string | undefined, name: string): number {
  if (value === undefined) return 0;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new Error(`--${name} must be a port number`);
  return n;
}

async function main(args: string[]): Promise<void> {
  const host = flag(args, 'host') ?? '127.0.0.1';
  const apiKey = flag(args, 'api-key');
  const openai = await startFakeOpenAI({ host, port: port(flag(args, 'openai-port'), 'openai-port'), apiKey });
  const anthropic = await startFakeAnthropic({ host, port: port(flag(args, 'anthropic-port'), 'anthropic-port'), apiKey });
  process.stdout.write(`${JSON.stringify({ openai: openai.url, anthropic: anthropic.url })}\n`);
  const stop = () => {
    void Promise.all([openai.close(), anthropic.close()]).then(() => process.exit(0));
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}

main(process.argv.slice(2)).catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
