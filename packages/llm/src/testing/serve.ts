/**
 * Runs the fake providers as a standalone process, for manual runs, end-to-end setups and benchmarks:
 *
 *   node --import tsx packages/llm/src/testing/serve.ts [--host 127.0.0.1] [--openai-port 0] [--anthropic-port 0]
 *     [--azure-port 0] [--gemini-port 0] [--bedrock-port 0] [--api-key KEY]
 *
 * Prints one JSON line with their base URLs, then serves the default echo reply until SIGINT or SIGTERM. The Bedrock
 * fake takes any SigV4 signature for us-east-1 (and `--api-key` as a Bedrock API key).
 */
import { startFakeAnthropic } from './fake-anthropic';
import { startFakeAzureOpenAI } from './fake-azure-openai';
import { startFakeBedrock } from './fake-bedrock';
import { startFakeGemini } from './fake-gemini';
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
  const azure = await startFakeAzureOpenAI({ host, port: port(flag(args, 'azure-port'), 'azure-port'), apiKey });
  const gemini = await startFakeGemini({ host, port: port(flag(args, 'gemini-port'), 'gemini-port'), apiKey });
  const bedrock = await startFakeBedrock({ host, port: port(flag(args, 'bedrock-port'), 'bedrock-port'), apiKey });
  const all = { openai, anthropic, azure, gemini, bedrock };
  process.stdout.write(`${JSON.stringify(Object.fromEntries(Object.entries(all).map(([name, fake]) => [name, fake.url])))}\n`);
  const stop = () => {
    void Promise.all(Object.values(all).map((fake) => fake.close())).then(() => process.exit(0));
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}

main(process.argv.slice(2)).catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
