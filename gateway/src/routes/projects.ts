import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import type { projectsV1 } from '@svc/proto';
import type { GatewayDeps } from '../deps';
import type { Principal } from '../lib/principal';
import { pageOf, route } from '../lib/route';
import { IdParams, Obj, PageQuery, Str, Timestamp } from '../schemas';

const Project = Obj({
  id: Type.String(),
  name: Type.String(),
  description: Type.String(),
  language: Type.String(),
  created_at: Timestamp,
  updated_at: Timestamp,
});

/** A project in the gateway's cache: by tenant and id, the subject of projects' change feed. */
const cacheKey = (principal: Principal, id: string) => `${principal.tenantId}/${id}`;

const Fields = {
  name: Str(1, 200),
  description: Type.String({ maxLength: 5000 }),
  language: Type.String({ maxLength: 50 }),
};

/** The spec names project timestamps in snake_case (2.2); kept as it has them. */
export function projectView(p: projectsV1.Project) {
  return { id: p.id, name: p.name, description: p.description, language: p.language, created_at: p.createdAt, updated_at: p.updatedAt };
}

export function projectRoutes(app: FastifyInstance, deps: GatewayDeps): void {
  const { projects } = deps.clients;

  route(app, {
    method: 'POST',
    url: '/api/v1/projects',
    operationId: 'createProject',
    access: 'projects:write',
    tag: 'projects',
    summary: 'Create a project',
    status: 201,
    body: Obj({ name: Fields.name, description: Type.Optional(Fields.description), language: Type.Optional(Fields.language) }),
    response: Project,
    handler: async ({ body, call }) =>
      projectView(
        (await projects.createProject({ name: body.name, description: body.description ?? '', language: body.language ?? '' }, call))
          .project!,
      ),
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/projects',
    operationId: 'listProjects',
    access: 'projects:read',
    tag: 'projects',
    summary: 'Projects, newest first',
    query: PageQuery,
    list: true,
    response: Project,
    handler: async ({ query, call }) => {
      const res = await projects.listProjects({ limit: query.limit, cursor: query.cursor ?? '' }, call);
      return pageOf(res.projects.map(projectView), query.limit, res.nextCursor);
    },
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/projects/:id',
    operationId: 'getProject',
    access: 'projects:read',
    tag: 'projects',
    summary: 'One project',
    params: IdParams,
    response: Project,
    handler: ({ params, principal, call }) =>
      deps.caches.projects.get(cacheKey(principal, params.id), async () =>
        projectView((await projects.getProject({ id: params.id }, call)).project!),
      ),
  });

  route(app, {
    method: 'PATCH',
    url: '/api/v1/projects/:id',
    operationId: 'updateProject',
    access: 'projects:write',
    tag: 'projects',
    summary: 'Change some fields of a project',
    params: IdParams,
    body: Obj({
      name: Type.Optional(Fields.name),
      description: Type.Optional(Fields.description),
      language: Type.Optional(Fields.language),
    }),
    response: Project,
    handler: async ({ params, body, principal, call }) => {
      const res = await projects.updateProject({ id: params.id, ...body }, call);
      // Read-your-writes here at once; other gateways drop it when they read projects' feed.
      deps.caches.projects.drop(cacheKey(principal, params.id));
      return projectView(res.project!);
    },
  });

  route(app, {
    method: 'DELETE',
    url: '/api/v1/projects/:id',
    operationId: 'deleteProject',
    access: 'projects:write',
    tag: 'projects',
    summary: 'Delete a project',
    params: IdParams,
    response: Obj({ id: Type.String(), deleted: Type.Boolean() }),
    handler: async ({ params, principal, call }) => {
      const res = await projects.deleteProject({ id: params.id }, call);
      deps.caches.projects.drop(cacheKey(principal, params.id));
      return { id: res.id, deleted: true };
    },
  });
}
