// /projects: the tenant's projects, a create form, and rename and delete per project.
import { useState } from 'preact/hooks';
import { call, listAll } from '../sdk';
import { DeleteButton, ErrorText, Form, Table, useAction, useLoad, when, useSearch } from '../ui';

export interface Project {
  id: string;
  name: string;
  description: string;
  created_at: string;
}

function ProjectRow({ project, changed }: { project: Project; changed: (message: string) => void }) {
  const [renaming, setRenaming] = useState(false);
  const { error, act } = useAction(changed);
  return (
    <tr>
      <th scope="row">
        {renaming ? (
          <Form
            submit="Save"
            onSubmit={(f) =>
              act(
                () => call('updateProject', { params: { id: project.id }, body: { name: f.get('name') as string } }),
                `Renamed to ${f.get('name')}.`,
              )
            }
          >
            <label class="sr-only" for={`rename-${project.id}`}>{`New name for ${project.name}`}</label>
            <input id={`rename-${project.id}`} name="name" required maxLength={200} defaultValue={project.name} />
          </Form>
        ) : (
          project.name
        )}
        <ErrorText error={error} />
      </th>
      <td>{project.description}</td>
      <td>{when(project.created_at)}</td>
      <td class="actions">
        <button type="button" class="secondary" onClick={() => setRenaming(!renaming)} aria-label={`Rename ${project.name}`}>
          {renaming ? 'Cancel' : 'Rename'}
        </button>{' '}
        <DeleteButton
          label={project.name}
          confirm={() => act(() => call('deleteProject', { params: { id: project.id } }), `Deleted ${project.name}.`)}
        />
      </td>
    </tr>
  );
}

export default function ProjectsPage() {
  const { data, error, reload } = useLoad(() => listAll('listProjects', {}) as Promise<Project[]>, []);
  const { shown, box } = useSearch(data, (p) => p.name);
  const [status, setStatus] = useState('');
  const changed = (message: string) => {
    setStatus(message);
    void reload();
  };
  return (
    <>
      <h1>Projects</h1>
      <section aria-labelledby="create-title">
        <h2 id="create-title">Create a project</h2>
        <Form
          submit="Create"
          reset
          onSubmit={async (f) => {
            const p = await call('createProject', {
              body: { name: f.get('name') as string, description: (f.get('description') as string) || undefined },
            });
            changed(`Created ${p.name}.`);
          }}
        >
          <p class="field">
            <label for="project-name">Name</label>
            <input id="project-name" name="name" required maxLength={200} />
          </p>
          <p class="field">
            <label for="project-description">Description</label>
            <input id="project-description" name="description" maxLength={2000} />
          </p>
        </Form>
      </section>
      <p role="status">{status}</p>
      <ErrorText error={error} />
      <section aria-labelledby="list-title">
        <h2 id="list-title">Your projects</h2>
        {box}
        <Table id="projects" columns={['Name', 'Description', 'Created', '']} empty="No projects yet." rows={shown}>
          {shown?.map((p) => (
            <ProjectRow key={p.id} project={p} changed={changed} />
          ))}
        </Table>
      </section>
    </>
  );
}
