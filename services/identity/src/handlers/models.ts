/**
 * The model catalogue (CONTRACT.md 12): the deployments a tenant's calls to a model name may go to. Keys are sealed
 * with the master key as LLM settings' keys are and never leave through the public RPCs; ResolveModels, for chat and
 * agents, returns them decrypted (or read from the named secret at that moment) with each entry's effective price.
 */
import { auditChange } from '../audit/log';
import { type CallContext, EgressError, errors, newId, nowIso, pages, resolveAndCheck } from '@svc/kit';
import { resolvePrice } from '@svc/llm';
import type { eventsV1, identityV1 } from '@svc/proto';
import { identityCaps } from '../caps';
import { models, type ModelDoc, secrets } from '../collections';
import type { IdentityDeps } from '../context';
import { Checks } from '../validate';
import { requireAuth } from './auth';
import { SECRET_NAME } from './secrets';
import { requireManager } from './team';

export const MODEL_PROVIDERS = ['openai', 'anthropic', 'openai-compatible', 'azure-openai', 'gemini', 'bedrock'] as const;
/** 1-100 characters of `[A-Za-z0-9._:/-]`; `agent:` names an agent on /v1, never a catalogue entry. */
export const MODEL_NAME = /^[A-Za-z0-9._:/-]{1,100}$/;
const AGENT_PREFIX = 'agent:';
const MAX_WEIGHT = 1000;
const MAX_OUTPUT_TOKENS = 1_000_000;
const ID_SHAPE = /^mdl_[0-9A-Za-z]{1,64}$/;

type Input = Omit<identityV1.UpdateModelRequest, 'id'>;

/** A price as stored: numbers >= 0 (credits per 1,000,000 tokens). */
function checkPrice(c: Checks, p: identityV1.ModelPriceInput): ModelDoc['price'] {
  const ok = (v: number | undefined) => v === undefined || (Number.isFinite(v) && v >= 0 && v <= 1e12);
  if (!ok(p.input)) c.fail('price.input', 'must be a number >= 0');
  if (!ok(p.output)) c.fail('price.output', 'must be a number >= 0');
  if (!ok(p.cachedInput)) c.fail('price.cachedInput', 'must be a number >= 0');
  return { input: p.input, output: p.output, cachedInput: p.cachedInput ?? null };
}

export function modelHandlers(deps: IdentityDeps) {
  const col = deps.store.collection(models);
  const cap = identityCaps(deps.store, deps.settings).models;

  function priceOf(d: ModelDoc): eventsV1.ModelPrice {
    return resolvePrice(
      {
        provider: d.provider,
        upstreamModel: d.upstreamModel,
        baseUrl: d.baseUrl ?? undefined,
        price: d.price && { input: d.price.input, output: d.price.output, cachedInput: d.price.cachedInput ?? undefined },
      },
      deps.settings.pricing,
    );
  }

  function view(d: ModelDoc): identityV1.Model {
    return {
      id: d.id,
      name: d.name,
      provider: d.provider,
      upstreamModel: d.upstreamModel,
      baseUrl: d.baseUrl ?? '',
      apiKeySet: d.apiKeySealed !== null,
      apiKeySecret: d.apiKeySecret ?? '',
      apiVersion: d.apiVersion ?? '',
      region: d.region ?? '',
      weight: d.weight,
      price: priceOf(d),
      maxOutputTokens: d.maxOutputTokens ?? undefined,
      enabled: d.enabled,
      createdAt: d.createdAt,
      updatedAt: d.updatedAt,
    };
  }

  async function find(tenantId: string, id: string): Promise<ModelDoc> {
    const doc = ID_SHAPE.test(id) ? await col.get(id, { tenantId }) : null;
    if (!doc) throw errors.notFound('model', id);
    return doc;
  }

  /**
   * The entry `input` makes of `current` (null: a new one), every field checked. A base URL must pass the egress
   * guard now (400 base_url_not_allowed), as it must again at every connection.
   */
  async function entryOf(input: Input, current: ModelDoc | null, tenantId: string): Promise<ModelDoc> {
    const c = new Checks();
    const name = input.name ?? current?.name ?? '';
    if (!MODEL_NAME.test(name)) c.fail('name', 'must be 1-100 characters of A-Z a-z 0-9 . _ : / -');
    else if (name.startsWith(AGENT_PREFIX)) c.fail('name', `must not start with ${AGENT_PREFIX} (it names an agent)`);
    const provider = input.provider ?? current?.provider ?? '';
    c.oneOf('provider', provider, MODEL_PROVIDERS);
    const upstreamModel = (input.upstreamModel ?? current?.upstreamModel ?? name).trim() || name;
    if (upstreamModel.length > 200) c.fail('upstreamModel', 'must be at most 200 characters');
    const weight = input.weight ?? current?.weight ?? 1;
    if (!Number.isInteger(weight) || weight < 1 || weight > MAX_WEIGHT) c.fail('weight', `must be an integer from 1 to ${MAX_WEIGHT}`);
    const maxOutputTokens = input.clearMaxOutputTokens ? null : (input.maxOutputTokens ?? current?.maxOutputTokens ?? null);
    if (maxOutputTokens !== null && !(Number.isInteger(maxOutputTokens) && maxOutputTokens >= 1 && maxOutputTokens <= MAX_OUTPUT_TOKENS))
      c.fail('maxOutputTokens', `must be an integer from 1 to ${MAX_OUTPUT_TOKENS}`);
    const price = input.clearPrice ? null : input.price ? checkPrice(c, input.price) : (current?.price ?? null);
    if (input.apiKey !== undefined && (input.apiKey.length < 1 || input.apiKey.length > 4000))
      c.fail('apiKey', 'must be 1 to 4000 characters');
    const apiKeySecret = input.clearApiKeySecret ? null : (input.apiKeySecret ?? current?.apiKeySecret ?? null);
    if (apiKeySecret !== null && !SECRET_NAME.test(apiKeySecret)) c.fail('apiKeySecret', 'must name a secret');
    const text = (field: string, value: string | undefined, clear: boolean, was: string | null | undefined) => {
      const v = clear ? null : value !== undefined ? value.trim() || null : (was ?? null);
      if (v !== null && v.length > 200) c.fail(field, 'must be at most 200 characters');
      return v;
    };
    const apiVersion = text('apiVersion', input.apiVersion, input.clearApiVersion, current?.apiVersion);
    const region = text('region', input.region, input.clearRegion, current?.region);
    let baseUrl = input.clearBaseUrl ? null : input.baseUrl !== undefined ? input.baseUrl.trim() || null : (current?.baseUrl ?? null);
    if (baseUrl !== null && baseUrl.length > 2000) c.fail('baseUrl', 'must be at most 2000 characters');
    if (!baseUrl && (provider === 'openai-compatible' || provider === 'azure-openai'))
      c.fail('baseUrl', `is required for ${provider} providers`);
    c.done();
    if (baseUrl !== null && baseUrl !== current?.baseUrl) {
      try {
        await resolveAndCheck(baseUrl, deps.egress);
      } catch (err) {
        if (!(err instanceof EgressError)) throw err;
        throw errors.badRequest('base_url_not_allowed', `The base URL is not allowed: ${err.message}`, {
          fields: [{ field: 'baseUrl', message: err.message }],
        });
      }
    }
    if (baseUrl !== null) baseUrl = baseUrl.replace(/\/+$/, '');
    const now = nowIso();
    return {
      id: current?.id ?? newId('mdl'),
      tenantId,
      name,
      provider,
      upstreamModel,
      baseUrl,
      apiKeySealed: input.clearApiKey
        ? null
        : input.apiKey !== undefined
          ? deps.box.encrypt(input.apiKey)
          : (current?.apiKeySealed ?? null),
      apiKeySecret,
      apiVersion,
      region,
      weight,
      price,
      maxOutputTokens,
      enabled: input.enabled ?? current?.enabled ?? true,
      createdAt: current?.createdAt ?? now,
      updatedAt: now,
    };
  }

  /** The key an entry calls with: its own, else its secret's current value ('' when the secret is gone). */
  async function keyOf(d: ModelDoc): Promise<string> {
    if (d.apiKeySealed) return deps.box.decrypt(d.apiKeySealed);
    if (!d.apiKeySecret) return '';
    const secret = await deps.store.collection(secrets).findOne({ tenantId: d.tenantId, name: d.apiKeySecret });
    return secret ? deps.box.decrypt(secret.valueSealed) : '';
  }

  return {
    async createModel(req: identityV1.CreateModelRequest, ctx: CallContext): Promise<identityV1.CreateModelResponse> {
      const auth = requireManager(ctx);
      const doc = await entryOf(
        {
          ...req,
          clearBaseUrl: false,
          clearApiKey: false,
          clearApiKeySecret: false,
          clearApiVersion: false,
          clearRegion: false,
          clearPrice: false,
          clearMaxOutputTokens: false,
        },
        null,
        auth.tid,
      );
      await cap.transaction(auth.tid, async (tx, places) => {
        await places.take();
        await tx.collection(models).insert(doc);
        await auditChange(tx, ctx, auth.tid, 'model.created', { type: 'model', id: doc.id }, { after: modelAudit(doc) });
      });
      deps.audit.kick();
      return { model: view(doc) };
    },

    async listModels(req: identityV1.ListModelsRequest, ctx: CallContext): Promise<identityV1.ListModelsResponse> {
      requireAuth(ctx);
      const filter = req.name ? { tenantId: ctx.auth.tid, name: req.name } : { tenantId: ctx.auth.tid };
      const page = await col.find(filter, { limit: Math.min(Math.max(req.limit || 20, 1), 100), cursor: req.cursor || null });
      return { models: page.items.map(view), nextCursor: page.nextCursor ?? '' };
    },

    async getModel(req: identityV1.GetModelRequest, ctx: CallContext): Promise<identityV1.GetModelResponse> {
      requireAuth(ctx);
      return { model: view(await find(ctx.auth.tid, req.id)) };
    },

    async updateModel(req: identityV1.UpdateModelRequest, ctx: CallContext): Promise<identityV1.UpdateModelResponse> {
      const auth = requireManager(ctx);
      const current = await find(auth.tid, req.id);
      const doc = await entryOf(req, current, auth.tid);
      // Compare-and-set on the version read: a concurrent change is not overwritten unseen.
      const updated = await deps.store.transaction(async (tx) => {
        const next = await tx.collection(models).update(current.id, { tenantId: auth.tid, updatedAt: current.updatedAt }, doc);
        if (next)
          await auditChange(
            tx,
            ctx,
            auth.tid,
            'model.updated',
            { type: 'model', id: doc.id },
            { before: modelAudit(current), after: modelAudit(doc) },
          );
        return next;
      });
      if (!updated) throw errors.conflict('The model changed concurrently; try again', { id: req.id });
      deps.audit.kick();
      return { model: view(doc) };
    },

    async deleteModel(req: identityV1.DeleteModelRequest, ctx: CallContext): Promise<identityV1.DeleteModelResponse> {
      const auth = requireManager(ctx);
      const doc = await find(auth.tid, req.id);
      const deleted = await cap.transaction(auth.tid, async (tx, places) => {
        const ok = await tx.collection(models).delete(doc.id, { tenantId: auth.tid });
        if (ok) {
          await places.free();
          await auditChange(tx, ctx, auth.tid, 'model.deleted', { type: 'model', id: doc.id }, { before: modelAudit(doc) });
        }
        return ok;
      });
      if (!deleted) throw errors.notFound('model', req.id);
      deps.audit.kick();
      return { id: doc.id };
    },

    async resolveModels(req: identityV1.ResolveModelsRequest, ctx: CallContext): Promise<identityV1.ResolveModelsResponse> {
      requireAuth(ctx);
      const tenantId = ctx.auth.tid;
      const out: identityV1.ResolvedModel[] = [];
      for await (const page of pages(col, req.name ? { tenantId, name: req.name } : { tenantId }, { limit: 100, order: 'asc' }))
        for (const d of page)
          if (d.enabled)
            out.push({
              id: d.id,
              name: d.name,
              provider: d.provider,
              upstreamModel: d.upstreamModel,
              baseUrl: d.baseUrl ?? '',
              apiKey: await keyOf(d),
              apiVersion: d.apiVersion ?? '',
              region: d.region ?? '',
              weight: d.weight,
              price: priceOf(d),
              maxOutputTokens: d.maxOutputTokens ?? undefined,
            });
      return { models: out };
    },
  };
}

/** What the audit log shows of an entry: whether a key is set, never a key. */
function modelAudit(d: ModelDoc) {
  return {
    name: d.name,
    provider: d.provider,
    upstreamModel: d.upstreamModel,
    baseUrl: d.baseUrl,
    hasApiKey: d.apiKeySealed !== null,
    apiKeySecret: d.apiKeySecret,
    apiVersion: d.apiVersion,
    region: d.region,
    weight: d.weight,
    price: d.price,
    maxOutputTokens: d.maxOutputTokens,
    enabled: d.enabled,
  };
}
