/**
 * The monitoring pack (deploy/monitoring) offline: every alert and dashboard query parses as PromQL (Prometheus's
 * grammar), each alert links a runbook section that exists, the alerts cover what the platform team asked for, and
 * docker-compose's Prometheus and Grafana load these very files. That the metrics they name exist is checked on a
 * running system by test/http/metrics.test.ts; that the Helm chart ships them, by test/deploy/deploy.test.ts.
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { parse } from 'yaml';
import { alertRules, dashboardQueries, monitoredMetrics, parsePromql } from '../helpers/promql';
import { root } from './code-facts';

/** GitHub's heading anchor: lower case, punctuation dropped, spaces as hyphens. */
const anchorOf = (heading: string) =>
  heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');

it('parses every alert expression and dashboard query as PromQL, each selecting svc_ metrics', () => {
  const exprs = [...alertRules().map((r) => r.expr), ...dashboardQueries()];
  expect(exprs.length).toBeGreaterThan(25);
  for (const expr of exprs) expect({ expr, errors: parsePromql(expr).errors }).toEqual({ expr, errors: [] });
  // The parser can fail: a broken expression is reported.
  expect(parsePromql('sum(rate(svc_http_requests_total[5m])').errors).not.toEqual([]);
  // Every name is the processes' own (svc_), or Prometheus's per-target `up`.
  expect(monitoredMetrics().filter((m) => !m.startsWith('svc_') && m !== 'up')).toEqual([]);
});

it('alerts on what a platform team watches, each with a runbook section that exists', () => {
  const rules = alertRules();
  const watched = {
    'error rate': /svc_(http_requests|grpc_server_handled)_total/,
    'p99 latency': /histogram_quantile\(0\.99/,
    'consumer stalled': /svc_bus_consumer_stalled/,
    'dead letters': /dead_letter/,
    'reservation expiries': /svc_credit_reservations_expired_total/,
    'breaker open': /svc_llm_breaker_opened_total/,
    'webhook backlog': /svc_webhook_deliveries_due/,
    readiness: /svc_health_serving/,
  };
  for (const [what, pattern] of Object.entries(watched))
    expect({ what, alerts: rules.some((r) => pattern.test(r.expr)) }).toEqual({ what, alerts: true });
  for (const r of rules) {
    const url = r.annotations.runbook_url ?? '';
    const [file, anchor] = url.split('#');
    expect({ alert: r.alert, file, exists: existsSync(path.join(root, file)) }).toEqual({
      alert: r.alert,
      file: expect.stringMatching(/^docs\/runbooks\/.+\.md$/),
      exists: true,
    });
    const headings = [...readFileSync(path.join(root, file), 'utf8').matchAll(/^#+ (.+)$/gm)].map((m) => anchorOf(m[1]));
    expect({ alert: r.alert, anchor: headings.includes(anchor) ? anchor : `missing: ${anchor}` }).toEqual({ alert: r.alert, anchor });
    expect(r.annotations.summary).toBeTruthy();
  }
});

it("loads the same rules and dashboard into docker-compose's Prometheus and Grafana", () => {
  interface ComposeService {
    image?: string;
    volumes?: string[];
  }
  const compose = parse(readFileSync(path.join(root, 'docker-compose.yml'), 'utf8'), { merge: true }) as {
    services: Record<string, ComposeService>;
  };
  const mounts = (name: string) => (compose.services[name]?.volumes ?? []).map((v) => v.split(':'));
  const mounted = (name: string, source: string) => mounts(name).find(([from]) => path.normalize(from) === path.normalize(source))?.[1];

  // Prometheus: the rules file, named in its configuration, and a scrape of every process's metrics port.
  expect(compose.services.prometheus.image).toMatch(/^prom\/prometheus:/);
  const rulesAt = mounted('prometheus', './deploy/monitoring/rules.yaml');
  const configAt = mounted('prometheus', './deploy/monitoring/prometheus.yml');
  expect(rulesAt).toBeDefined();
  const config = parse(readFileSync(path.join(root, 'deploy/monitoring/prometheus.yml'), 'utf8')) as {
    rule_files: string[];
    scrape_configs: Array<{ static_configs: Array<{ targets: string[]; labels?: Record<string, string> }> }>;
  };
  expect(configAt).toBe('/etc/prometheus/prometheus.yml');
  expect(config.rule_files).toContain(rulesAt);
  const scraped = config.scrape_configs.flatMap((s) => s.static_configs);
  const apps = Object.entries(compose.services)
    .filter(([, s]) => (s as { build?: unknown }).build === '.')
    .map(([n]) => n);
  for (const app of apps)
    expect({ app, scraped: scraped.some((c) => c.labels?.app === app && c.targets.includes(`${app}:9464`)) }).toEqual({
      app,
      scraped: true,
    });

  // Grafana: the dashboard file, provisioned from the folder its provider names, on the Prometheus datasource.
  expect(compose.services.grafana.image).toMatch(/^grafana\/grafana:/);
  const dashboardAt = mounted('grafana', './deploy/monitoring/dashboard.json');
  const providers = parse(readFileSync(path.join(root, 'deploy/monitoring/grafana/dashboards.yaml'), 'utf8')) as {
    providers: Array<{ options: { path: string } }>;
  };
  expect(dashboardAt?.startsWith(`${providers.providers[0].options.path}/`)).toBe(true);
  const datasources = parse(readFileSync(path.join(root, 'deploy/monitoring/grafana/datasources.yaml'), 'utf8')) as {
    datasources: Array<{ type: string; url: string }>;
  };
  expect(datasources.datasources).toEqual([expect.objectContaining({ type: 'prometheus', url: 'http://prometheus:9090' })]);
});
