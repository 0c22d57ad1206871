import type { projectsV1 } from '@svc/proto';
import type { ProjectDoc } from './collections';

export function toProject(p: ProjectDoc): projectsV1.Project {
  return { id: p.id, name: p.name, description: p.description, language: p.language, createdAt: p.createdAt, updatedAt: p.updatedAt };
}
