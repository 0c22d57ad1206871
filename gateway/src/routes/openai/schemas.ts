/** The request and response schemas of the OpenAI-compatible routes (what OpenAI's API accepts, bounded). */
import { Type } from '@sinclair/typebox';
import { Nullable, Obj, Str } from '../../schemas';

const TEXT_MAX = 1024 * 1024;
const Metadata = Type.Record(Type.String({ maxLength: 64 }), Type.String({ maxLength: 512 }), {
  maxProperties: 16,
  description: 'Up to 16 string pairs, echoed on the response; `project_id` names the project of an agent run',
});
const Any = Type.Unsafe<unknown>({});
const JsonObject = Type.Object({}, { additionalProperties: true });
const Temperature = Type.Optional(Nullable(Type.Number({ minimum: 0, maximum: 2 })));
const TopP = Type.Optional(Nullable(Type.Number({ minimum: 0, maximum: 1 })));
const MaxTokens = Type.Optional(Nullable(Type.Integer({ minimum: 1, maximum: 200_000 })));
const Penalty = Type.Optional(Nullable(Type.Number({ minimum: -2, maximum: 2 })));
const ToolChoice = Type.Optional(
  Type.Union([Type.Literal('none'), Type.Literal('auto'), Type.Literal('required'), JsonObject], {
    description: 'Passed as given on the response; `none` offers the model no tools',
  }),
);
const TextPart = Obj({
  type: Type.Union([Type.Literal('text'), Type.Literal('input_text'), Type.Literal('output_text')]),
  text: Str(0, TEXT_MAX),
  annotations: Type.Optional(Type.Array(Any, { maxItems: 100 })),
});
const Content = Type.Union([Str(0, TEXT_MAX), Type.Array(TextPart, { maxItems: 100 })]);
const Role = Type.Union(['system', 'developer', 'user', 'assistant', 'tool'].map((r) => Type.Literal(r)));
const ToolCallIn = Obj({
  id: Str(1, 200),
  type: Type.Literal('function'),
  function: Obj({ name: Str(1, 64), arguments: Str(0, TEXT_MAX) }),
});
const ChatMessage = Obj({
  role: Role,
  content: Type.Optional(Nullable(Content)),
  name: Type.Optional(Str(1, 64)),
  tool_calls: Type.Optional(Type.Array(ToolCallIn, { maxItems: 128 })),
  tool_call_id: Type.Optional(Str(1, 200)),
  refusal: Type.Optional(Nullable(Type.String({ maxLength: TEXT_MAX }))),
  annotations: Type.Optional(Type.Array(Any, { maxItems: 100 })),
});
const FunctionSpec = {
  name: Str(1, 64, { pattern: '^[A-Za-z0-9_-]+$' }),
  description: Type.Optional(Type.String({ maxLength: 4000 })),
  parameters: Type.Optional(JsonObject),
  strict: Type.Optional(Nullable(Type.Boolean())),
};

export const ChatCompletionBody = Obj({
  model: Str(1, 200),
  messages: Type.Array(ChatMessage, { minItems: 1, maxItems: 2000 }),
  stream: Type.Optional(Nullable(Type.Boolean())),
  stream_options: Type.Optional(
    Nullable(Obj({ include_usage: Type.Optional(Type.Boolean()), include_obfuscation: Type.Optional(Type.Boolean()) })),
  ),
  tools: Type.Optional(Type.Array(Obj({ type: Type.Literal('function'), function: Obj(FunctionSpec) }), { maxItems: 128 })),
  tool_choice: ToolChoice,
  parallel_tool_calls: Type.Optional(Nullable(Type.Boolean())),
  temperature: Temperature,
  top_p: TopP,
  max_tokens: MaxTokens,
  max_completion_tokens: MaxTokens,
  n: Type.Optional(Nullable(Type.Integer({ minimum: 1, maximum: 1, description: 'One choice only' }))),
  stop: Type.Optional(Nullable(Type.Union([Str(1, 200), Type.Array(Str(1, 200), { maxItems: 4 })]))),
  presence_penalty: Penalty,
  frequency_penalty: Penalty,
  seed: Type.Optional(Nullable(Type.Integer())),
  user: Type.Optional(Str(0, 256)),
  safety_identifier: Type.Optional(Str(0, 256)),
  prompt_cache_key: Type.Optional(Str(0, 256)),
  metadata: Type.Optional(Nullable(Metadata)),
  store: Type.Optional(Nullable(Type.Boolean())),
});

const InputMessage = Obj({
  type: Type.Optional(Type.Literal('message')),
  role: Type.Union(['system', 'developer', 'user', 'assistant'].map((r) => Type.Literal(r))),
  content: Content,
  id: Type.Optional(Str(1, 200)),
  status: Type.Optional(Str(1, 20)),
});
const ApprovalResponse = Obj(
  {
    type: Type.Literal('agent_approval_response'),
    approval_request_id: Str(1, 100),
    approve: Type.Boolean(),
    reason: Type.Optional(Str(0, 1000)),
  },
  'Approves (or rejects) the agent_approval_request of the previous response, whose run this response then follows',
);

export const ResponsesBody = Obj({
  model: Str(1, 200, { description: 'A model of GET /v1/models: the tenant\'s model, or "agent:<agentId>"' }),
  input: Type.Union([Str(1, TEXT_MAX), Type.Array(Type.Union([InputMessage, ApprovalResponse]), { minItems: 1, maxItems: 2000 })]),
  instructions: Type.Optional(Nullable(Str(0, TEXT_MAX))),
  previous_response_id: Type.Optional(Nullable(Str(1, 100))),
  conversation: Type.Optional(Nullable(Type.Union([Str(1, 100), Obj({ id: Str(1, 100) })]))),
  stream: Type.Optional(Nullable(Type.Boolean())),
  stream_options: Type.Optional(Nullable(Obj({ include_obfuscation: Type.Optional(Type.Boolean()) }))),
  background: Type.Optional(Nullable(Type.Boolean())),
  store: Type.Optional(Nullable(Type.Boolean())),
  tools: Type.Optional(Type.Array(Obj({ type: Type.Literal('function'), ...FunctionSpec }), { maxItems: 128 })),
  tool_choice: ToolChoice,
  parallel_tool_calls: Type.Optional(Nullable(Type.Boolean())),
  temperature: Temperature,
  top_p: TopP,
  max_output_tokens: MaxTokens,
  truncation: Type.Optional(Nullable(Type.Union([Type.Literal('auto'), Type.Literal('disabled')]))),
  metadata: Type.Optional(Nullable(Metadata)),
  user: Type.Optional(Str(0, 256)),
  safety_identifier: Type.Optional(Str(0, 256)),
  prompt_cache_key: Type.Optional(Str(0, 256)),
});

export const ResponseObject = Type.Object(
  {
    id: Type.String(),
    object: Type.Literal('response'),
    created_at: Type.Integer(),
    status: Type.Union(['queued', 'in_progress', 'completed', 'incomplete', 'failed', 'cancelled'].map((s) => Type.Literal(s))),
    model: Type.String(),
    output: Type.Array(Any, {
      description:
        'message and function_call items as OpenAI has them, and agent_approval_request {id, run_id, agent_id, name, call_id, arguments} when an agent run waits for approval',
    }),
    conversation: Nullable(Obj({ id: Type.String() })),
    usage: Nullable(JsonObject),
    error: Nullable(Obj({ code: Type.String(), message: Type.String() })),
  },
  { additionalProperties: true },
);
export const CompletionObject = Type.Object(
  { id: Type.String(), object: Type.Literal('chat.completion'), model: Type.String(), choices: Type.Array(Any), usage: JsonObject },
  { additionalProperties: true },
);
export const ResponseParams = Obj({ id: Str(1, 100) });

export type Body = Record<string, any>;
