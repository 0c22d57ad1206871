// /settings/security/api-keys: create a key (scopes, expiry, rate limits, a credit budget), shown once; each key's
// usage against its limits, which can be changed; rotate with a grace period (the new key shown once); revoke.
import { useState } from 'preact/hooks';
import { call, listAll } from '../sdk';
import { ErrorText, Form, Input, Table, integer, num, props, text, useAction, useLoad, useSearch, when } from '../ui';

interface Limits {
  requestsPerMinute?: number;
  tokensPerMinute?: number;
  concurrency?: number;
  creditBudget?: { credits: number; period: 'total' | 'month' };
}
interface ApiKey {
  id: string;
  name: string;
  start: string;
  type: string;
  environment: string;
  scopes: string[] | null;
  createdAt: string;
  lastUsedAt: string | null;
  expiresAt: string | null;
  limits?: Limits;
  usage?: { requestsThisMinute: number; tokensThisMinute: number; creditsThisPeriod: number };
  key?: string;
}

/** Each limit with what the key used of it: "3 of 60 requests/min; 120 of 500 credits (month)". */
function usageText(k: ApiKey): string {
  const u = k.usage ?? { requestsThisMinute: 0, tokensThisMinute: 0, creditsThisPeriod: 0 };
  const l = k.limits ?? {};
  const parts = [
    `${integer(u.requestsThisMinute)}${l.requestsPerMinute ? ` of ${integer(l.requestsPerMinute)}` : ''} requests/min`,
    `${integer(u.tokensThisMinute)}${l.tokensPerMinute ? ` of ${integer(l.tokensPerMinute)}` : ''} tokens/min`,
    `${integer(u.creditsThisPeriod)}${l.creditBudget ? ` of ${integer(l.creditBudget.credits)} (${l.creditBudget.period})` : ''} credits`,
  ];
  if (l.concurrency) parts.push(`at most ${l.concurrency} at once`);
  return parts.join('; ');
}

function limitsOf(f: FormData): Limits | undefined {
  const limits: Limits = {};
  const rpm = num(f, 'requestsPerMinute');
  const tpm = num(f, 'tokensPerMinute');
  const conc = num(f, 'concurrency');
  const budget = num(f, 'budget');
  if (rpm !== undefined) limits.requestsPerMinute = rpm;
  if (tpm !== undefined) limits.tokensPerMinute = tpm;
  if (conc !== undefined) limits.concurrency = conc;
  if (budget !== undefined) limits.creditBudget = { credits: budget, period: f.get('budgetPeriod') as 'total' | 'month' };
  return Object.keys(limits).length ? limits : undefined;
}

/** The limit fields of the create form (`id` "key"), or of one key's change form (`of` its name, its limits shown). */
function LimitFields({ id, of, limits }: { id: string; of?: string; limits?: Limits }) {
  const label = (text: string) => (of ? `${text} of ${of}` : text);
  const numbers: Array<[suffix: string, name: string, text: string, min: number, value: number | undefined]> = [
    ['rpm', 'requestsPerMinute', 'Requests per minute', 1, limits?.requestsPerMinute],
    ['tpm', 'tokensPerMinute', 'Tokens per minute', 1, limits?.tokensPerMinute],
    ['concurrency', 'concurrency', 'Concurrent calls', 1, limits?.concurrency],
    ['budget', 'budget', 'Credit budget', 0, limits?.creditBudget?.credits],
  ];
  return (
    <fieldset>
      <legend>{label('Limits') + ' (empty: none)'}</legend>
      {numbers.map(([suffix, name, text, min, value]) => (
        <Input key={name} id={`${id}-${suffix}`} name={name} label={label(text)} type="number" min={min} step={1} defaultValue={value} />
      ))}
      <p class="field">
        <label for={`${id}-budget-period`}>{label('Budget period')}</label>
        <select id={`${id}-budget-period`} name="budgetPeriod">
          <option value="month" selected={limits?.creditBudget?.period !== 'total'}>
            month (UTC calendar month)
          </option>
          <option value="total" selected={limits?.creditBudget?.period === 'total'}>
            total
          </option>
        </select>
      </p>
    </fieldset>
  );
}

/** A change of every limit: a value sets it, an empty field removes it (null). */
function limitsPatchOf(f: FormData) {
  const budget = num(f, 'budget');
  return {
    requestsPerMinute: num(f, 'requestsPerMinute') ?? null,
    tokensPerMinute: num(f, 'tokensPerMinute') ?? null,
    concurrency: num(f, 'concurrency') ?? null,
    creditBudget: budget === undefined ? null : { credits: budget, period: f.get('budgetPeriod') as 'total' | 'month' },
  };
}

function KeyRow({ k, rotated, changed }: { k: ApiKey; rotated: (k: ApiKey) => void; changed: (m: string) => void }) {
  const [rotating, setRotating] = useState(false);
  const [limiting, setLimiting] = useState(false);
  const { error, act } = useAction(changed);
  return (
    <tr>
      <td>{k.name}</td>
      <td class="mono">{`${k.start}…`}</td>
      <td>{k.type}</td>
      <td>{k.environment}</td>
      <td>{k.scopes?.length ? k.scopes.join(', ') : 'all (unscoped)'}</td>
      <td>{usageText(k)}</td>
      <td>{when(k.createdAt)}</td>
      <td>{when(k.lastUsedAt)}</td>
      <td>{k.expiresAt ? when(k.expiresAt) : 'never'}</td>
      <td class="actions">
        {rotating ? (
          <Form
            submit={`Confirm rotate of ${k.name}`}
            onSubmit={async (f) => {
              const next = (await call('rotateApiKey', {
                params: { id: k.id },
                body: { gracePeriodSeconds: num(f, 'grace') ?? 0 },
              })) as unknown as ApiKey;
              setRotating(false);
              rotated(next);
            }}
          >
            <label for={`grace-${k.id}`}>{`Grace period for the old ${k.name} key (seconds)`}</label>
            <input id={`grace-${k.id}`} name="grace" type="number" min={0} max={86_400} step={1} defaultValue="0" />
          </Form>
        ) : (
          <button type="button" class="secondary" aria-label={`Rotate ${k.name}`} onClick={() => setRotating(true)}>
            Rotate
          </button>
        )}{' '}
        {limiting ? (
          <Form
            submit={`Save limits of ${k.name}`}
            onSubmit={async (f) => {
              await call('updateApiKey', { params: { id: k.id }, body: { limits: limitsPatchOf(f) } });
              setLimiting(false);
              changed(`Limits of ${k.name} saved: in effect within a second.`);
            }}
          >
            <LimitFields id={`limits-${k.id}`} of={k.name} limits={k.limits} />
          </Form>
        ) : (
          <button type="button" class="secondary" aria-label={`Change limits of ${k.name}`} onClick={() => setLimiting(true)}>
            Limits
          </button>
        )}{' '}
        <button
          type="button"
          class="secondary"
          aria-label={`Revoke ${k.name}`}
          onClick={() => act(() => call('revokeApiKey', { params: { id: k.id } }), `Key ${k.name} revoked: it no longer works.`)}
        >
          Revoke
        </button>
        <ErrorText error={error} />
      </td>
    </tr>
  );
}

export default function ApiKeysPage() {
  const { scopes = [], types = [], environments = [] } = props<{ scopes: string[]; types: string[]; environments: string[] }>();
  const keys = useLoad(() => listAll('listApiKeys', {}) as unknown as Promise<ApiKey[]>, []);
  const [status, setStatus] = useState('');
  const [shownKey, setShownKey] = useState<ApiKey>();
  const [copied, setCopied] = useState('');
  const { shown, box } = useSearch(keys.data, (k) => k.name);
  const changed = (message: string) => {
    setStatus(message);
    void keys.reload();
  };
  const reveal = (k: ApiKey, message: string) => {
    setShownKey(k);
    setCopied('');
    changed(message);
    setTimeout(() => {
      const input = document.getElementById('new-key-value') as HTMLInputElement | null;
      input?.focus();
      input?.select();
    });
  };
  return (
    <>
      <h1>API keys</h1>
      <section aria-labelledby="create-title">
        <h2 id="create-title">Create a key</h2>
        <Form
          submit="Create key"
          reset
          onSubmit={async (f) => {
            const chosen = f.getAll('scopes') as string[];
            const expires = text(f, 'expiresAt');
            const created = (await call('createApiKey', {
              body: {
                name: text(f, 'name')!,
                type: f.get('type') as string,
                environment: f.get('environment') as string,
                ...(chosen.length ? { scopes: chosen } : {}),
                ...(expires ? { expiresAt: new Date(`${expires}T23:59:59Z`).toISOString() } : {}),
                limits: limitsOf(f),
              },
            })) as unknown as ApiKey;
            reveal(created, `Key ${created.name} created.`);
          }}
        >
          <p class="field">
            <label for="key-name">Name</label>
            <input id="key-name" name="name" required maxLength={100} />
          </p>
          <p class="field">
            <label for="key-type">Type</label>
            <select id="key-type" name="type">
              {types.map((t) => (
                <option value={t}>{t}</option>
              ))}
            </select>
          </p>
          <p class="field">
            <label for="key-environment">Environment</label>
            <select id="key-environment" name="environment">
              {environments.map((e) => (
                <option value={e}>{e}</option>
              ))}
            </select>
          </p>
          <fieldset>
            <legend>Scopes (none: the key may do everything your role may)</legend>
            {scopes.map((s) => (
              <label class="check">
                <input type="checkbox" name="scopes" value={s} /> {s}
              </label>
            ))}
          </fieldset>
          <Input id="key-expires" name="expiresAt" label="Expires on (UTC, empty: never)" type="date" />
          <LimitFields id="key" />
        </Form>
      </section>
      {shownKey?.key && (
        <section aria-labelledby="new-key-title">
          <h2 id="new-key-title">{`Your new key: ${shownKey.name}`}</h2>
          <p>Copy it now: it is shown only once.</p>
          <p class="field">
            <label for="new-key-value">Key</label>
            <input id="new-key-value" readOnly value={shownKey.key} />
          </p>
          <p>
            <button
              type="button"
              onClick={async () => {
                const input = document.getElementById('new-key-value') as HTMLInputElement;
                try {
                  await navigator.clipboard.writeText(input.value);
                } catch {
                  input.select();
                  document.execCommand('copy');
                }
                setCopied('Copied');
              }}
            >
              Copy
            </button>{' '}
            <span role="status">{copied}</span>
          </p>
        </section>
      )}
      <p role="status">{status}</p>
      <ErrorText error={keys.error} />
      <section aria-labelledby="list-title">
        <h2 id="list-title">Keys</h2>
        {box}
        <Table
          id="keys"
          columns={['Name', 'Key', 'Type', 'Environment', 'Scopes', 'Usage', 'Created', 'Last used', 'Expires', '']}
          empty="No keys yet."
          rows={shown}
        >
          {shown?.map((k) => (
            <KeyRow
              key={k.id}
              k={k}
              changed={changed}
              rotated={(next) => reveal(next, `Key ${next.name} rotated: the old secret works until its grace period ends.`)}
            />
          ))}
        </Table>
      </section>
    </>
  );
}
