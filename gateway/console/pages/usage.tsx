// /usage: credits per UTC day stacked by model (a Chart.js bar chart), and a table per API key with the window's
// usage beside each key's live counters. Both come from GET /billing/usage, which is built from the ledger.
import { useLayoutEffect, useMemo, useRef, useState } from 'preact/hooks';
import { call, listAll } from '../sdk';
import { ErrorText, integer, useLoad } from '../ui';

// Chart.js is most of this page's bytes: fetched beside the usage data (not before it, as a static import made it),
// and the chart drawn once both are here.
const chartJs = import('../chart').then((m) => m.Chart);

interface UsageRow {
  start: string;
  model?: string;
  apiKeyId?: string;
  calls: number;
  inputTokens: number;
  outputTokens: number;
  credits: number;
}
interface ApiKey {
  id: string;
  name: string;
  start: string;
  limits?: { creditBudget?: { credits: number; period: string } };
  usage?: { requestsThisMinute: number; tokensThisMinute: number; creditsThisPeriod: number };
}

const DAY = 86_400_000;
// Distinguishable on white and for common colour-vision deficiencies (Okabe-Ito).
const PALETTE = ['#0072B2', '#E69F00', '#009E73', '#CC79A7', '#56B4E9', '#D55E00', '#F0E442', '#000000'];

/** The window: the last `days` whole UTC days, today included. */
function lastDays(days: number) {
  const today = Math.floor(Date.now() / DAY) * DAY;
  return { from: new Date(today - (days - 1) * DAY).toISOString(), to: new Date(today + DAY).toISOString() };
}

const usage = (w: { from: string; to: string }, groupBy: string) =>
  call('getBillingUsage', { query: { ...w, granularity: 'day', groupBy } }) as unknown as Promise<UsageRow[]>;

// The first window's chart query is asked for as this module loads, which main.tsx does beside its session check,
// rather than after the page's first render; the page takes it for its first load. (Signed out, both get a 401 and
// main.tsx goes to sign in.)
const FIRST_DAYS = 30;
let first: { window: { from: string; to: string }; rows: Promise<UsageRow[]> } | undefined;
{
  const window = lastDays(FIRST_DAYS);
  first = { window, rows: usage(window, 'model') };
  first.rows.catch(() => undefined);
}

function CreditsChart({ days, rows }: { days: string[]; rows: UsageRow[] }) {
  const canvas = useRef<HTMLCanvasElement>(null);
  // Drawn as soon as the canvas is in the document, not a frame later (useEffect waits for the next paint).
  useLayoutEffect(() => {
    const models = [...new Set(rows.map((r) => r.model ?? 'unknown'))].sort();
    let chart: { destroy(): void } | undefined;
    let gone = false;
    void chartJs.then((Chart) => {
      if (gone) return;
      chart = new Chart(canvas.current!, {
        type: 'bar',
        data: {
          labels: days,
          datasets: models.map((model, i) => ({
            label: model,
            data: days.map((d) =>
              rows.filter((r) => r.start.startsWith(d) && (r.model ?? 'unknown') === model).reduce((n, r) => n + r.credits, 0),
            ),
            backgroundColor: PALETTE[i % PALETTE.length],
          })),
        },
        options: {
          animation: false,
          maintainAspectRatio: false,
          scales: {
            x: { stacked: true },
            // Whole credits, numbered by `integer` (Chart.js's own numbers would call Intl: see ui.tsx).
            y: {
              stacked: true,
              beginAtZero: true,
              title: { display: true, text: 'Credits' },
              ticks: { precision: 0, callback: (value) => integer(Number(value)) },
            },
          },
        },
      });
      canvas.current!.dataset.drawn = 'true';
    });
    return () => {
      gone = true;
      chart?.destroy();
    };
  }, [days, rows]);
  const total = rows.reduce((n, r) => n + r.credits, 0);
  return (
    <div class="chart">
      <canvas ref={canvas} role="img" aria-label={`Credits per day by model: ${integer(total)} credits in ${days.length} days`} />
    </div>
  );
}

export default function UsagePage() {
  const [days, setDays] = useState(FIRST_DAYS);
  const w = useMemo(() => (days === FIRST_DAYS && first ? first.window : lastDays(days)), [days]);
  // The chart waits for its own query only; the table's two are asked for at the same time and fill it when they come.
  const chart = useLoad(() => {
    const rows = first && first.window === w ? first.rows : usage(w, 'model');
    first = undefined;
    return rows;
  }, [days]);
  const table = useLoad(async () => {
    const [byKey, keys] = await Promise.all([usage(w, 'apiKey'), listAll('listApiKeys', {}) as unknown as Promise<ApiKey[]>]);
    return { byKey, keys };
  }, [days]);
  const labels = useMemo(
    () => Array.from({ length: days }, (_, i) => new Date(Date.parse(w.from) + i * DAY).toISOString().slice(0, 10)),
    [w, days],
  );

  const perKey = new Map<string, UsageRow>();
  for (const r of table.data?.byKey ?? []) {
    const k = r.apiKeyId ?? '';
    const sum = perKey.get(k) ?? { start: '', calls: 0, inputTokens: 0, outputTokens: 0, credits: 0 };
    perKey.set(k, {
      ...sum,
      calls: sum.calls + r.calls,
      inputTokens: sum.inputTokens + r.inputTokens,
      outputTokens: sum.outputTokens + r.outputTokens,
      credits: sum.credits + r.credits,
    });
  }
  const keyRows = [
    ...(table.data?.keys ?? []).map((k) => ({ id: k.id, label: `${k.name} (${k.start}…)`, key: k, sum: perKey.get(k.id) })),
    ...(perKey.has('') ? [{ id: '', label: 'Signed-in users (no key)', key: undefined, sum: perKey.get('') }] : []),
  ];

  return (
    <>
      <h1>Usage</h1>
      <p class="field">
        <label for="usage-days">Period</label>
        <select id="usage-days" value={String(days)} onChange={(e) => setDays(Number((e.target as HTMLSelectElement).value))}>
          <option value="7">Last 7 days</option>
          <option value="30">Last 30 days</option>
          <option value="90">Last 90 days</option>
        </select>
      </p>
      <ErrorText error={chart.error ?? table.error} />
      <section aria-labelledby="chart-title" aria-busy={chart.loading}>
        <h2 id="chart-title">Credits per day, by model</h2>
        {chart.data && <CreditsChart days={labels} rows={chart.data} />}
        {chart.data && chart.data.length === 0 && <p>No model usage in this period.</p>}
      </section>
      <section aria-labelledby="keys-title" aria-busy={table.loading}>
        <h2 id="keys-title">By API key</h2>
        <table id="usage-keys">
          <thead>
            <tr>
              <th scope="col">Key</th>
              <th scope="col">Calls</th>
              <th scope="col">Input tokens</th>
              <th scope="col">Output tokens</th>
              <th scope="col">Credits</th>
              <th scope="col">Requests this minute</th>
              <th scope="col">Credits this budget period</th>
            </tr>
          </thead>
          <tbody>
            {keyRows.map(({ id, label, key, sum }) => (
              <tr key={id}>
                <th scope="row">{label}</th>
                <td>{integer(sum?.calls ?? 0)}</td>
                <td>{integer(sum?.inputTokens ?? 0)}</td>
                <td>{integer(sum?.outputTokens ?? 0)}</td>
                <td>{integer(sum?.credits ?? 0)}</td>
                <td>{key?.usage ? integer(key.usage.requestsThisMinute) : '—'}</td>
                <td>
                  {key?.usage ? integer(key.usage.creditsThisPeriod) : '—'}
                  {key?.limits?.creditBudget ? ` of ${integer(key.limits.creditBudget.credits)} (${key.limits.creditBudget.period})` : ''}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </section>
    </>
  );
}
