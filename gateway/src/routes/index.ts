import type { FastifyInstance } from 'fastify';
import type { GatewayDeps } from '../deps';
import { adminRoutes } from './admin';
import { agentRoutes } from './agents';
import { apiKeyRoutes } from './api-keys';
import { auditRoutes } from './audit';
import { authRoutes } from './auth';
import { billingRoutes } from './billing';
import { chatRoutes } from './chat';
import { cliAuthRoutes } from './cli-auth';
import { eventRoutes } from './events';
import { openAiRoutes } from './openai';
import { passthroughRoutes } from './passthrough';
import { mcpRoutes } from './mcp';
import { mcpServerRoutes } from './mcp-servers';
import { modelRoutes } from './models';
import { projectRoutes } from './projects';
import { regionRoutes } from './regions';
import { requestRoutes } from './requests';
import { secretRoutes } from './secrets';
import { settingsRoutes } from './settings';
import { systemRoutes } from './system';
import { tenantRoutes } from './tenant';
import { invitationRoutes } from './invitations';
import { webhookRoutes } from './webhooks';

export function registerRoutes(app: FastifyInstance, deps: GatewayDeps): void {
  systemRoutes(app, deps);
  authRoutes(app, deps);
  cliAuthRoutes(app, deps);
  tenantRoutes(app, deps);
  invitationRoutes(app, deps);
  settingsRoutes(app, deps);
  modelRoutes(app, deps);
  apiKeyRoutes(app, deps);
  projectRoutes(app, deps);
  agentRoutes(app, deps);
  mcpServerRoutes(app, deps);
  mcpRoutes(app, deps);
  webhookRoutes(app, deps);
  eventRoutes(app, deps);
  chatRoutes(app, deps);
  billingRoutes(app, deps);
  requestRoutes(app, deps);
  adminRoutes(app, deps);
  regionRoutes(app, deps);
  secretRoutes(app, deps);
  auditRoutes(app, deps);
  passthroughRoutes(app, deps, {
    maxRequestBytes: deps.config.passthroughMaxRequestBytes,
    maxResponseBytes: deps.config.passthroughMaxResponseBytes,
    timeoutMs: deps.config.passthroughTimeoutMs,
  });
  openAiRoutes(app, deps);
}
