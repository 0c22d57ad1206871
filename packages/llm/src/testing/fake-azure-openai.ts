/**
 * A fake Azure OpenAI resource on loopback: the OpenAI fake's chat and embeddings on Azure's deployment URLs,
 * `POST /openai/deployments/{deployment}/chat/completions?api-version=...` (and `/embeddings`), authenticated by the
 * `api-key` header, with Azure's error bodies (`{"error": {"code": "429", "message": ...}}`). The deployment is the
 * model: `conversation.model` is the deployment name whatever the body says, as Azure does.
 */
import { chat, embeddings, readConversation, type SendError } from './fake-openai';
import { sendJson, startFakeServer, type FakeProviderServer, type FakeServerOptions } from './fake-server';

export interface FakeAzureOpenAIOptions extends FakeServerOptions {
  /** The `api-version` values accepted; others get 404 as Azure answers. Default: any non-empty value. */
  apiVersions?: string[];
  /** Deployments that exist; others get 404 `DeploymentNotFound`. Default: any. */
  deployments?: string[];
}

const DEFAULT_MESSAGES: Record<number, string> = {
  400: 'Invalid request.',
  401: 'Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource.',
  429: 'Requests to the ChatCompletions_Create Operation under Azure OpenAI API have exceeded call rate limit of your current pricing tier. Please retry after the time in the retry-after header.',
  500: 'The server had an error while processing your request.',
  503: 'The service is temporarily unable to process your request.',
};

const sendAzureError: SendError = (ctx, status, message, code, headers = {}) =>
  sendJson(
    ctx.res,
    status,
    { error: { code: code ?? String(status), message: message ?? DEFAULT_MESSAGES[status] ?? `Error ${status}.` } },
    { 'apim-request-id': `fake-apim-${ctx.serial()}`, 'x-request-id': `req_fake_${ctx.serial()}`, ...headers },
  );

/** Starts a fake Azure OpenAI resource; `url` is its endpoint `http://127.0.0.1:<port>` (the settings' `baseUrl`). */
export function startFakeAzureOpenAI(options: FakeAzureOpenAIOptions = {}): Promise<FakeProviderServer> {
  return startFakeServer(
    options,
    (origin) => origin,
    async (ctx) => {
      const { req, record } = ctx;
      const url = new URL(record.path, 'http://fake');
      if (options.apiKey !== undefined && req.headers['api-key'] !== options.apiKey) {
        sendAzureError(ctx, 401);
        return;
      }
      const apiVersion = url.searchParams.get('api-version');
      if (!apiVersion || (options.apiVersions && !options.apiVersions.includes(apiVersion))) {
        sendAzureError(ctx, 404, 'Resource not found', '404');
        return;
      }
      const route = /^\/openai\/deployments\/([^/]+)\/(chat\/completions|embeddings)$/.exec(url.pathname);
      if (req.method !== 'POST' || !route) {
        sendAzureError(ctx, 404, 'Resource not found', '404');
        return;
      }
      const deployment = decodeURIComponent(route[1]);
      if (options.deployments && !options.deployments.includes(deployment)) {
        sendAzureError(
          ctx,
          404,
          'The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again.',
          'DeploymentNotFound',
        );
        return;
      }
      const body = (typeof record.body === 'object' && record.body !== null ? record.body : {}) as Record<string, unknown>;
      // Azure takes the model from the URL; the body's `model` is optional and ignored.
      record.body = { ...body, model: deployment };
      if (route[2] === 'embeddings') {
        await embeddings(ctx, sendAzureError);
        record.body = body;
        return;
      }
      const conversation = readConversation(record.body);
      record.body = body;
      if (typeof conversation === 'string') {
        sendAzureError(ctx, 400, conversation);
        return;
      }
      record.conversation = conversation;
      await chat(ctx, conversation, sendAzureError);
    },
  );
}
