// Small pieces every console page uses: the signed-in caller, loading state, errors, and number formats.
import { useCallback, useEffect, useLayoutEffect, useRef, useState } from 'preact/hooks';
import type { OperationId, Input } from '@svc/sdk/browser';
import { describe, isUnauthorized, pager, toLogin, type Item } from './sdk';

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
  // Asked for as soon as the page is in the document, not after its first paint (useEffect waits for the next frame):
  // the data is what the page waits for.
  useLayoutEffect(() => void run(), [run]);
  return { ...state, reload: run };
}

export function ErrorText({ error }: { error?: string }) {
  return error ? (
    <p role="alert" class="error">
      {error}
    </p>
  ) : null;
}

/**
 * 1234567 as "1,234,567" (en-US grouping). Written out rather than with Intl: a page's first Intl call loads ICU's
 * data, tens of milliseconds before the first render (the usage page's chart numbers its axis with this too).
 */
export const integer = (n: number) =>
  Number.isSafeInteger(n) ? String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ',') : n.toLocaleString('en-US');
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

/** Delete in two steps: `Delete` (named "Delete <label>" for screen readers), then "Confirm delete of <label>". */
export function DeleteButton({ label, confirm }: { label: string; confirm: () => void }) {
  const [confirming, setConfirming] = useState(false);
  return confirming ? (
    <button type="button" class="danger" onClick={confirm}>
      {`Confirm delete of ${label}`}
    </button>
  ) : (
    <button type="button" class="secondary" aria-label={`Delete ${label}`} onClick={() => setConfirming(true)}>
      Delete
    </button>
  );
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

/** A search box over a list: the part of `items` whose `name` holds the text typed (case-insensitive). */
export function useSearch<T>(items: T[] | undefined, name: (item: T) => string, label = 'Search') {
  const [text, setText] = useState('');
  const shown = items?.filter((i) => name(i).toLowerCase().includes(text.trim().toLowerCase()));
  const box = (
    <p class="field search">
      <label for="search">{label}</label>
      <input id="search" type="search" value={text} onInput={(e) => setText((e.currentTarget as HTMLInputElement).value)} />
    </p>
  );
  return { shown, box };
}

/**
 * A long list read 50 at a time with a `Load more` button (never a silent stop): `input` is the operation's input
 * (its filters); a change of `key` starts again.
 */
export function usePaged<K extends OperationId>(operation: K, input: Input<K>, key: string) {
  const [state, setState] = useState<{ items: Array<Item<K>>; more: boolean; error?: string; loading: boolean }>({
    items: [],
    more: false,
    loading: true,
  });
  // The walk in progress (its cursor): a reload starts a new one, which `Load more` then continues.
  const source = useRef<ReturnType<typeof pager<K>>>();
  const load = async (p: ReturnType<typeof pager<K>>, keep: Array<Item<K>>) => {
    setState((s) => ({ ...s, loading: true }));
    try {
      const page = await p.next(50);
      setState({ items: [...keep, ...page.items], more: page.more, loading: false });
    } catch (err) {
      if (isUnauthorized(err)) return toLogin();
      setState({ items: keep, more: false, error: describe(err), loading: false });
    }
  };
  const restart = () => {
    source.current = pager(operation, input);
    void load(source.current, []);
  };
  // `key` names the input: a new filter, a new walk.
  useEffect(restart, [key]);
  const more = state.more ? (
    <p>
      <button type="button" class="secondary" disabled={state.loading} onClick={() => source.current && load(source.current, state.items)}>
        Load more
      </button>
    </p>
  ) : null;
  return { ...state, more, reload: restart };
}

/** Form values: a trimmed string, or undefined when empty. */
export const text = (f: FormData, name: string) => ((f.get(name) as string | null) ?? '').trim() || undefined;
/** A number field: undefined when empty. */
export const num = (f: FormData, name: string) => (text(f, name) === undefined ? undefined : Number(text(f, name)));
/** A datetime-local field as an ISO time (the browser's zone), or undefined. */
export const isoOf = (f: FormData, name: string) => (text(f, name) ? new Date(text(f, name)!).toISOString() : undefined);

/** A labelled input (its other attributes passed on). */
export function Input(props: { id: string; label: string } & preact.InputHTMLAttributes) {
  const { label, ...attrs } = props;
  return (
    <p class="field">
      <label for={props.id}>{label}</label>
      <input {...attrs} />
    </p>
  );
}

/**
 * A select's options with `current` selected. (Preact hands a select's `defaultValue` to the browser as an attribute,
 * which it ignores: an edit form would show the first option and save it.)
 */
export function Options({ values, current }: { values: readonly string[]; current?: string | null }) {
  return (
    <>
      {values.map((v) => (
        <option value={v} selected={v === current}>
          {v}
        </option>
      ))}
    </>
  );
}

/** A labelled select of `options`, the first one `any` (value ''). */
export function Choice(props: { id: string; name: string; label: string; any: string; options: Array<string | [string, string]> }) {
  return (
    <p class="field">
      <label for={props.id}>{props.label}</label>
      <select id={props.id} name={props.name}>
        <option value="">{props.any}</option>
        {props.options.map((o) => (typeof o === 'string' ? <option value={o}>{o}</option> : <option value={o[0]}>{o[1]}</option>))}
      </select>
    </p>
  );
}

/**
 * A list's filters: on `Filter`, `read` turns the form into the operation's query (empty values dropped) and
 * `apply` receives it. Times are datetime-local fields read with `isoOf`.
 */
export function FilterForm(props: {
  read: (f: FormData) => Record<string, string | undefined>;
  apply: (filters: Record<string, string>) => void;
  children: preact.ComponentChildren;
}) {
  return (
    <form
      class="filters"
      aria-label="Filters"
      onSubmit={(event) => {
        event.preventDefault();
        const read = props.read(new FormData(event.currentTarget as HTMLFormElement));
        props.apply(Object.fromEntries(Object.entries(read).filter((e): e is [string, string] => Boolean(e[1]))));
      }}
    >
      {props.children}
      <p>
        <button type="submit">Filter</button>
      </p>
    </form>
  );
}

/** The catalogue's names a call can choose (enabled entries; a name with several entries once), sorted. */
export const modelNames = (models: Array<{ name: string; enabled: boolean }>): string[] =>
  [...new Set(models.filter((m) => m.enabled).map((m) => m.name))].sort();

/** The one-time token a link carries as its last path segment (/invitations/:token, /reset-password/:token, ...). */
export const linkToken = (): string => decodeURIComponent(location.pathname.split('/').pop() ?? '');
