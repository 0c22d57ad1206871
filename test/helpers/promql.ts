/**
 * The expressions of the monitoring pack (deploy/monitoring: the alerts' rules, the dashboard's queries), parsed
 * with Prometheus's own PromQL grammar (@prometheus-io/lezer-promql, the one its web UI uses): syntax errors, and
 * the metric names each selects.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { parser } from '@prometheus-io/lezer-promql';
import { parse } from 'yaml';

const root = path.resolve(__dirname, '../..');

export interface Alert {
  alert: string;
  expr: string;
  annotations: Record<string, string>;
}

/** The alerting rules of deploy/monitoring/rules.yaml. */
export function alertRules(): Alert[] {
  const file = parse(readFileSync(path.join(root, 'deploy/monitoring/rules.yaml'), 'utf8')) as { groups: Array<{ rules: Alert[] }> };
  return file.groups.flatMap((g) => g.rules);
}

/**
 * The dashboard's queries as Prometheus gets them: Grafana replaces its range variables before sending
 * ($__rate_interval, $__range, $__interval), so they are replaced here too.
 */
export function dashboardQueries(): string[] {
  const dashboard = JSON.parse(readFileSync(path.join(root, 'deploy/monitoring/dashboard.json'), 'utf8')) as {
    panels: Array<{ targets?: Array<{ expr: string }> }>;
  };
  return dashboard.panels.flatMap((p) => (p.targets ?? []).map((t) => t.expr.replace(/\$__(rate_interval|range|interval)/g, '5m')));
}

/** The syntax errors of `expr` (the text at each error node) and the metric names of its vector selectors. */
export function parsePromql(expr: string): { errors: string[]; metrics: string[] } {
  const errors: string[] = [];
  const metrics = new Set<string>();
  const cursor = parser.parse(expr).cursor();
  do {
    if (cursor.type.isError) errors.push(`at ${cursor.from}: "${expr.slice(cursor.from, cursor.to + 10)}"`);
    if (cursor.name === 'Identifier' && cursor.node.parent?.name === 'VectorSelector') metrics.add(expr.slice(cursor.from, cursor.to));
  } while (cursor.next());
  return { errors, metrics: [...metrics] };
}

/** Every metric name the rules and the dashboard select. */
export function monitoredMetrics(): string[] {
  const exprs = [...alertRules().map((r) => r.expr), ...dashboardQueries()];
  return [...new Set(exprs.flatMap((e) => parsePromql(e).metrics))].sort();
}

/**
 * The sample names a Prometheus text exposition offers: each `# TYPE` (a histogram's _bucket, _sum and _count, a
 * summary's _sum and _count) and each sample line.
 */
export function exposedNames(text: string): Set<string> {
  const names = new Set<string>();
  for (const m of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    const [, name, type] = m;
    names.add(name);
    if (type === 'histogram') for (const s of ['_bucket', '_sum', '_count']) names.add(name + s);
    if (type === 'summary') for (const s of ['_sum', '_count']) names.add(name + s);
  }
  for (const m of text.matchAll(/^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]/gm)) names.add(m[1]);
  return names;
}
