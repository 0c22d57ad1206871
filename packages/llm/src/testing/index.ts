/**
 * Test doubles for the LLM providers: real HTTP servers on loopback speaking the OpenAI Chat Completions (and Azure
 * OpenAI's deployment URLs), Anthropic Messages, Gemini generateContent and Bedrock Converse wire protocols,
 * scriptable per request. Not exported from the package's main entry.
 */
export { startFakeOpenAI, type FakeOpenAIOptions } from './fake-openai';
export { startFakeAnthropic, type FakeAnthropicOptions } from './fake-anthropic';
export { startFakeAzureOpenAI, type FakeAzureOpenAIOptions } from './fake-azure-openai';
export { startFakeGemini, type FakeGeminiOptions } from './fake-gemini';
export { bedrockEventFrame, bedrockExceptionFrame, startFakeBedrock, type FakeBedrockOptions } from './fake-bedrock';
export {
  conversationTokens,
  echoReply,
  echoText,
  estimateTokens,
  fakeEmbedding,
  NOW_MARK,
  splitText,
  type FakeBehaviour,
  type FakeConversation,
  type FakeMessage,
  type FakeProviderServer,
  type FakeRequest,
  type FakeScriptItem,
  type FakeServerOptions,
  type FakeToolCall,
  type FakeUsage,
} from './fake-server';
export { drain, llmError, waitUntil, type Drained } from './drain';
