/** POST /v1/embeddings: OpenAI's embeddings on a catalogue model (or the default one), metered as input tokens. */
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import type { GatewayDeps } from '../../deps';
import { END_USER_MAX, endUserOf } from '../../lib/end-user';
import { assertKeyTokens } from '../../lib/key-usage';
import { route } from '../../lib/route';
import { Nullable, Obj, Str } from '../../schemas';

/** A provider may take this long to embed a full request (each attempt is bounded by the chat service's timeout). */
const EMBED_DEADLINE_MS = 5 * 60 * 1000;
const INPUT_MAX = 1024 * 1024;
const INPUTS_MAX = 2048;
/** A token array: the model's token ids (int32 on the way to the chat service). */
const Tokens = Type.Array(Type.Integer({ minimum: 0, maximum: 2 ** 31 - 1 }), { minItems: 1, maxItems: INPUT_MAX });

const EmbeddingsBody = Obj({
  model: Str(1, 200),
  input: Type.Union(
    [
      Str(1, INPUT_MAX),
      Type.Array(Str(1, INPUT_MAX), { minItems: 1, maxItems: INPUTS_MAX }),
      Tokens,
      Type.Array(Tokens, { minItems: 1, maxItems: INPUTS_MAX }),
    ],
    {
      description:
        "A string, up to 2048 strings, a token array, or up to 2048 token arrays, none empty; token arrays go to the provider as they are (OpenAI's protocol only) and count one token an id",
    },
  ),
  encoding_format: Type.Optional(Type.Union([Type.Literal('float'), Type.Literal('base64')])),
  dimensions: Type.Optional(Nullable(Type.Integer({ minimum: 1, maximum: 65_536 }))),
  user: Type.Optional(Str(0, 10_000)),
});

const EmbeddingsObject = Obj({
  object: Type.Literal('list'),
  data: Type.Array(
    Obj({
      object: Type.Literal('embedding'),
      index: Type.Integer(),
      embedding: Type.Union([Type.Array(Type.Number()), Type.String()], { description: 'Floats, or base64 of little-endian float32s' }),
    }),
  ),
  model: Type.String(),
  usage: Obj({ prompt_tokens: Type.Integer(), total_tokens: Type.Integer() }),
});

/** OpenAI's base64 encoding of a vector: its float32s, little-endian. */
function base64Of(values: number[]): string {
  const buf = Buffer.alloc(values.length * 4);
  values.forEach((v, i) => buf.writeFloatLE(v, i * 4));
  return buf.toString('base64');
}

/** The body's `input` as the chat service takes it: texts, or token arrays (one array is one input). */
function inputsOf(input: string | string[] | number[] | number[][]): { input: string[]; tokenInput: Array<{ tokens: number[] }> } {
  if (typeof input === 'string') return { input: [input], tokenInput: [] };
  if (typeof input[0] === 'string') return { input: input as string[], tokenInput: [] };
  if (typeof input[0] === 'number') return { input: [], tokenInput: [{ tokens: input as number[] }] };
  return { input: [], tokenInput: (input as number[][]).map((tokens) => ({ tokens })) };
}

export function embeddingsRoute(app: FastifyInstance, deps: GatewayDeps): void {
  const { chat } = deps.clients;

  route(app, {
    method: 'POST',
    url: '/v1/embeddings',
    operationId: 'openaiCreateEmbeddings',
    modelCall: true,
    access: 'llm:use',
    tag: 'openai',
    summary:
      "OpenAI-compatible Embeddings on a catalogue model (or the tenant's default model): reserved and billed as input tokens at the model's input price; the request log shows each call (source v1)",
    envelope: false,
    body: EmbeddingsBody,
    response: EmbeddingsObject,
    handler: async ({ body, call, principal, request, reply }) => {
      await assertKeyTokens(deps, principal, call, reply);
      const res = await chat.embed(
        {
          model: body.model,
          ...inputsOf(body.input),
          dimensions: body.dimensions ?? undefined,
          endUser: (body.user ?? endUserOf(request)).slice(0, END_USER_MAX),
        },
        { ...call, deadlineMs: EMBED_DEADLINE_MS },
      );
      reply.header('X-Served-Model', res.servedModel || res.model);
      const base64 = body.encoding_format === 'base64';
      return {
        object: 'list' as const,
        data: res.data.map((e, index) => ({
          object: 'embedding' as const,
          index,
          embedding: base64 ? base64Of(e.values) : e.values,
        })),
        model: res.servedModel || res.model,
        usage: { prompt_tokens: res.inputTokens, total_tokens: res.inputTokens },
      };
    },
  });
}
