import {
  addToOutbox,
  type CallContext,
  errors,
  type FieldError,
  newId,
  nowIso,
  readFeed,
  recordFeedEntry,
  type FeedNotifier,
  type Store,
  idempotent,
  type StoreSession,
  type OutboxRelay,
} from '@svc/kit';
import { domainEvent, TOPICS, authed } from '@svc/contracts';
import type { eventsV1, projectsV1 } from '@svc/proto';
import { projectCap, projectChanges, projects, type ProjectChangeDoc, type ProjectDoc } from '../collections';
import { toProject } from '../views';

const LIMITS = { name: [1, 200], description: [0, 5000], language: [0, 50] } as const;

/** Trims and checks the text fields that are present; every problem is reported at once. */
function checkFields(input: Partial<Record<keyof typeof LIMITS, string>>): Partial<Record<keyof typeof LIMITS, string>> {
  const out: Partial<Record<keyof typeof LIMITS, string>> = {};
  const problems: FieldError[] = [];
  for (const key of Object.keys(LIMITS) as Array<keyof typeof LIMITS>) {
    const value = input[key];
    if (value === undefined) continue;
    const v = key === 'description' ? value : value.trim();
    const [min, max] = LIMITS[key];
    if (v.length < min || v.length > max) problems.push({ field: key, message: `must be ${min} to ${max} characters` });
    out[key] = v;
  }
  if (problems.length) throw errors.validation(problems);
  return out;
}

function projectData(p: ProjectDoc): eventsV1.Event['data'] {
  return { $case: 'project', value: toProject(p) };
}

async function emit(tx: StoreSession, type: string, tenantId: string, data: eventsV1.Event['data']) {
  await addToOutbox(tx, domainEvent(TOPICS.projects, type, tenantId, data));
}

/**
 * Writes need `projects:write` here too, whoever holds the token (a run's delegated token included). Reads are
 * gated by the gateway's policy only: agents and chat read the project a caller names under `agents:*` scopes.
 */
export function projectHandlers(store: Store, relay: OutboxRelay, feed: FeedNotifier<ProjectChangeDoc>, maxProjectsPerTenant = 1000) {
  const col = store.collection(projects);
  const cap = projectCap(store, maxProjectsPerTenant);
  /** After a commit that changed or deleted a project: outbox relay and gateway watchers hear of it now. */
  const changed = () => {
    relay.notify();
    feed.announce();
  };

  return {
    async createProject(req: projectsV1.CreateProjectRequest, ctx: CallContext): Promise<projectsV1.CreateProjectResponse> {
      const { auth } = authed(ctx, 'projects:write');
      const f = checkFields({ name: req.name, description: req.description, language: req.language });
      const now = nowIso();
      const doc: ProjectDoc = {
        id: newId('prj'),
        tenantId: auth.tid,
        name: f.name!,
        description: f.description ?? '',
        language: f.language ?? '',
        createdAt: now,
        updatedAt: now,
      };
      // Once per Idempotency-Key: the project and the answer commit together (a retry after a crash finds it).
      const scope = { tenantId: auth.tid, operation: 'createProject', key: ctx.idempotencyKey, body: req };
      const answer = await idempotent<projectsV1.CreateProjectResponse>(store, scope, (commit) =>
        commit(
          async (tx) => {
            await cap.places(tx, auth.tid).take();
            await tx.collection(projects).insert(doc);
            await emit(tx, 'project.created', auth.tid, projectData(doc));
            return { project: toProject(doc) };
          },
          (body) => cap.transaction(auth.tid, (tx) => body(tx)),
        ),
      );
      relay.notify();
      return answer;
    },

    async listProjects(req: projectsV1.ListProjectsRequest, ctx: CallContext): Promise<projectsV1.ListProjectsResponse> {
      const { auth } = authed(ctx);
      const page = await col.find({ tenantId: auth.tid }, { limit: req.limit || 20, cursor: req.cursor || null });
      return { projects: page.items.map(toProject), nextCursor: page.nextCursor ?? '' };
    },

    async getProject(req: projectsV1.GetProjectRequest, ctx: CallContext): Promise<projectsV1.GetProjectResponse> {
      const { auth } = authed(ctx);
      const doc = await col.get(req.id, { tenantId: auth.tid });
      if (!doc) throw errors.notFound('project', req.id);
      return { project: toProject(doc) };
    },

    async updateProject(req: projectsV1.UpdateProjectRequest, ctx: CallContext): Promise<projectsV1.UpdateProjectResponse> {
      const { auth } = authed(ctx, 'projects:write');
      const f = checkFields({ name: req.name, description: req.description, language: req.language });
      const updated = await store.transaction(async (tx) => {
        const doc = await tx.collection(projects).update(req.id, { tenantId: auth.tid }, { ...f, updatedAt: nowIso() });
        if (!doc) return null;
        await emit(tx, 'project.updated', auth.tid, projectData(doc));
        await recordFeedEntry(tx, projectChanges, 'project_changed', `${auth.tid}/${doc.id}`);
        return doc;
      });
      if (!updated) throw errors.notFound('project', req.id);
      changed();
      return { project: toProject(updated) };
    },

    async deleteProject(req: projectsV1.DeleteProjectRequest, ctx: CallContext): Promise<projectsV1.DeleteProjectResponse> {
      const { auth } = authed(ctx, 'projects:write');
      const deleted = await cap.transaction(auth.tid, async (tx, places) => {
        const ok = await tx.collection(projects).delete(req.id, { tenantId: auth.tid });
        if (!ok) return false;
        await places.free();
        await emit(tx, 'project.deleted', auth.tid, { $case: 'deleted', value: { id: req.id } });
        await recordFeedEntry(tx, projectChanges, 'project_deleted', `${auth.tid}/${req.id}`);
        return true;
      });
      if (!deleted) throw errors.notFound('project', req.id);
      changed();
      return { id: req.id };
    },

    async listProjectChanges(req: projectsV1.ListProjectChangesRequest): Promise<projectsV1.ListProjectChangesResponse> {
      const { entries, lastSeq } = await readFeed(store, projectChanges, req.afterSeq, req.limit);
      return { changes: entries, lastSeq };
    },

    watchProjectChanges: feed.serveWatch,
  };
}
