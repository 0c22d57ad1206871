// Small pieces every console page uses: the signed-in caller, loading state, errors, and number formats.
import { useCallback, useEffect, useState } from 'preact/hooks';
import { describe, isUnauthorized, toLogin } from './sdk';

export interface Me {
  user: { id: string; email: string; name?: string };
  tenant: { id: string; name: string };
  role?: string;
}

/** Loads with `load` when `deps` change; `reload` runs it again. A 401 sends the visitor to sign in. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[]) {
  const [state, setState] = useState<{ data?: T; error?: string; loading: boolean }>({ loading: true });
  const run = useCallback(async () => {
    setState((s) => ({ ...s, loading: true }));
    try {
      setState({ data: await load(), loading: false });
    } catch (err) {
      if (isUnauthorized(err)) return toLogin();
      setState({ error: describe(err), loading: false });
    }
    // `deps` decide when to load again, as useEffect's list would.
  }, deps);
  useEffect(() => void run(), [run]);
  return { ...state, reload: run };
}

export function ErrorText({ error }: { error?: string }) {
  return error ? (
    <p role="alert" class="error">
      {error}
    </p>
  ) : null;
}

export const integer = (n: number) => n.toLocaleString('en-US');
export const when = (iso?: string | null) => (iso ? new Date(iso).toLocaleString() : 'never');

/**
 * A form whose submit runs `onSubmit` with its data, the button disabled meanwhile, and any error shown under it.
 * `reset` clears the fields after success.
 */
export function Form(props: {
  submit: string;
  reset?: boolean;
  onSubmit: (data: FormData) => Promise<unknown>;
  children: preact.ComponentChildren;
}) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string>();
  return (
    <form
      noValidate
      onSubmit={async (event) => {
        event.preventDefault();
        const form = event.currentTarget as HTMLFormElement;
        if (!form.reportValidity()) return;
        setBusy(true);
        try {
          await props.onSubmit(new FormData(form));
          setError(undefined);
          if (props.reset) form.reset();
        } catch (err) {
          if (isUnauthorized(err)) return toLogin();
          setError(describe(err));
        } finally {
          setBusy(false);
        }
      }}
    >
      {props.children}
      <p>
        <button type="submit" disabled={busy}>
          {props.submit}
        </button>
      </p>
      <ErrorText error={error} />
    </form>
  );
}

/** What the server put in the page for its script (`data-props` on #app: JSON, e.g. the event types). */
export function props<T>(): Partial<T> {
  try {
    return JSON.parse(document.getElementById('app')?.dataset.props ?? '{}') as Partial<T>;
  } catch {
    return {};
  }
}

/**
 * An action from a button: `act(fn, done)` runs `fn`, then reports `done` through `changed`; a failure is kept in
 * `error` for the row or section to show (a 401 sends the visitor to sign in).
 */
export function useAction(changed: (message: string) => void) {
  const [error, setError] = useState<string>();
  const act = async (fn: () => Promise<unknown>, done: string) => {
    try {
      await fn();
      setError(undefined);
      changed(done);
    } catch (err) {
      if (isUnauthorized(err)) return toLogin();
      setError(describe(err));
    }
  };
  return { error, act };
}

/**
 * A data table with column headers; a column named '' is the actions column (labelled for screen readers only).
 * With no rows it says `empty` instead.
 */
export function Table(props: { id: string; columns: string[]; empty: string; rows?: unknown[]; children: preact.ComponentChildren }) {
  if (props.rows && props.rows.length === 0) return <p>{props.empty}</p>;
  return (
    <table id={props.id}>
      <thead>
        <tr>
          {props.columns.map((c) => (
            <th scope="col">{c || <span class="sr-only">Actions</span>}</th>
          ))}
        </tr>
      </thead>
      <tbody>{props.children}</tbody>
    </table>
  );
}
