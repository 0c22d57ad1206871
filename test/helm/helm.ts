/**
 * Real Helm from Node: helm-java (Helm's own Go library in a jar, from Maven Central through test/helm/pom.xml)
 * driven by the single-file launcher HelmRun.java, one JVM per call: `helm lint --strict` of the chart and any
 * number of `helm template` renders. Used by test/deploy (the chart's objects) and prepare.ts (the jars early).
 */
import { execFileSync } from 'node:child_process';
import { resolve } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { mavenClasspath } from '../helpers/maven';

const POM = resolve(__dirname, 'pom.xml');
const LAUNCHER = resolve(__dirname, 'HelmRun.java');
const CACHE_DIR = resolve(__dirname, '../../node_modules/.cache/svc-helm');
/** The Kubernetes version templates are rendered for (Capabilities.KubeVersion; the chart asks for >= 1.27). */
export const KUBE_VERSION = '1.31.0';

export const helmClasspath = (): string => mavenClasspath(POM, CACHE_DIR, 'helm-java');

export interface Render {
  /** The release name. */
  name: string;
  namespace: string;
  valuesFiles?: string[];
  /** `--set` pairs. */
  set?: Record<string, string>;
}

export interface HelmResult<K> {
  lint: { failed: boolean; messages: string[] };
  /** Each render's objects, by release name. */
  renders: Record<string, K[]>;
}

/** Lints `chart` (strict) and renders it once per entry of `renders`, in one JVM. */
export function helm<K = Record<string, unknown>>(chart: string, renders: Render[]): HelmResult<K> {
  const specs = renders.map((r) =>
    [
      r.name,
      r.namespace,
      (r.valuesFiles ?? []).join(','),
      Object.entries(r.set ?? {})
        .map(([k, v]) => `${k}=${v}`)
        .join(';'),
    ].join('|'),
  );
  let out: string;
  try {
    out = execFileSync('java', ['-cp', helmClasspath(), LAUNCHER, chart, ...specs], {
      encoding: 'utf8',
      maxBuffer: 64 * 1024 * 1024,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
  } catch (err) {
    const e = err as Error & { stderr?: string };
    throw new Error(`helm (helm-java) failed on ${chart}:\n${(e.stderr ?? e.message).slice(-4000)}`);
  }
  const sections = out.split(/^=== /m).filter(Boolean);
  const [lintHead, ...lintLines] = sections[0].split('\n');
  const result: HelmResult<K> = {
    lint: { failed: lintHead !== 'lint failed=false', messages: lintLines.filter(Boolean) },
    renders: {},
  };
  for (const section of sections.slice(1)) {
    const newline = section.indexOf('\n');
    const name = section.slice(0, newline).replace(/^render /, '');
    result.renders[name] = parseAllDocuments(section.slice(newline + 1)).flatMap((doc) => {
      if (doc.errors.length) throw new Error(`helm template ${name}: not valid YAML: ${doc.errors[0].message}`);
      const o = doc.toJS() as K | null;
      return o === null ? [] : [o];
    });
  }
  return result;
}
