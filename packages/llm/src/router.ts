/**
 * Routing by model name (CONTRACT.md 12): a call to a catalogue name goes to one of the name's enabled entries,
 * chosen by weight among those whose breaker is closed; one that fails before its first token moves on to another
 * entry of the name, then to the fallbacks (CONTRACT.md 9). The routing is an order of candidates handed to
 * {@link createModelChain}, which already tries candidates in order, skips open breakers and never switches once a
 * model has answered: the name's entries in a weighted random order (the first drawn with probability weight / sum of
 * weights), those whose circuit is open last (the chain skips them without a request), then the fallbacks.
 */
import type { CircuitBreaker } from './breaker';
import { breakerKey, createModelChain, type ModelChain, type ModelChainOptions } from './fallback';
import type { LlmSettings } from './types';

/** One deployment a name may be served by. */
export interface RoutedEntry<T = unknown> {
  /** The entry's weight, an integer >= 1: its share of the calls among the admitted entries of its name. */
  weight: number;
  /** How it is called (its upstream model in `model`). */
  settings: LlmSettings;
  /** Whatever the caller needs back when this entry serves (the catalogue entry, its price). */
  meta: T;
}

export interface RouteOptions {
  breaker?: CircuitBreaker;
  /** Whose circuits (the tenant id), as for the chain. */
  scope: string;
  /** A number in [0, 1); Math.random by default (tests pass a seeded one). */
  random?: () => number;
}

/**
 * The entries in the order one call tries them: a weighted random order of those the breaker would let through
 * (sampling without replacement: key u^(1/weight), largest first), then those whose circuit is open.
 */
export function orderByWeight<T>(entries: ReadonlyArray<RoutedEntry<T>>, options: RouteOptions): Array<RoutedEntry<T>> {
  const random = options.random ?? Math.random;
  const { breaker, scope } = options;
  const open: Array<RoutedEntry<T>> = [];
  const keyed: Array<{ entry: RoutedEntry<T>; key: number }> = [];
  for (const entry of entries) {
    if (breaker && !breaker.wouldAdmit(breakerKey(scope, entry.settings))) open.push(entry);
    else keyed.push({ entry, key: Math.pow(random(), 1 / Math.max(1, entry.weight)) });
  }
  keyed.sort((a, b) => b.key - a.key);
  return [...keyed.map((k) => k.entry), ...open];
}

export interface RoutedCall<T> {
  chain: ModelChain;
  /** The candidates in the order the chain tries them: the name's entries, then the fallbacks. */
  candidates: LlmSettings[];
  /** What the candidate at an index (ServedModel.index) came from: an entry's meta, or null for a fallback. */
  metaAt(index: number): T | null;
}

/**
 * One call to a name: its entries ordered by {@link orderByWeight}, then `fallbacks`, as one model chain. `extra`
 * (timeouts, the egress-guarded transport) applies to every candidate.
 */
export function routeByName<T>(
  entries: ReadonlyArray<RoutedEntry<T>>,
  fallbacks: ReadonlyArray<LlmSettings>,
  options: RouteOptions & Omit<ModelChainOptions, 'breaker' | 'scope'>,
  extra: Partial<LlmSettings> = {},
): RoutedCall<T> {
  const ordered = orderByWeight(entries, options);
  const candidates = [...ordered.map((e) => ({ ...e.settings, ...extra })), ...fallbacks.map((f) => ({ ...f, ...extra }))];
  const { random, ...chainOptions } = options;
  void random;
  return {
    chain: createModelChain(candidates, chainOptions),
    candidates,
    metaAt: (index) => ordered[index]?.meta ?? null,
  };
}
