import type { JSONWebKeySet } from 'jose';
import {
  commonConfig,
  ConfigError,
  type ConfigOf,
  type ConfigSpec,
  field,
  kafkaSecurity,
  kafkaTopicSettings,
  loadConfig,
  mongoUriFor,
} from './config';
import { connectionProblem } from './connection-problem';
import { withDeadline } from './deadline';
import { loadSecretBox, type SecretBox } from './crypto';
import { BackgroundSubscription, MissingTopicsError, openBus, OUTBOX_COLLECTIONS, OutboxRelay } from './events';
import { feedHeads } from './feed';
import type { EventBus, SubscribeOptions } from './events/types';
import { DEFAULT_MAX_CONNECTION_AGE_GRACE_MS, DEFAULT_MAX_CONNECTION_AGE_MS, GrpcServer, type ServiceRegistration } from './grpc/server';
import { JwtVerifier } from './jwt';
import { serveMetrics } from './metrics';
import { untraced } from './untraced';
import { createLogger, type Logger } from './logger';
import { EXIT_PORT_IN_USE, isPortInUse } from './ports';
import { idempotency, idempotencyRetention } from './idempotency';
import { openStore } from './storage';
import { sendSignal, watchSignal } from './storage/watch-writes';
import { flushTelemetry } from './telemetry-flush';
import type { CollectionDef, Store } from './storage/types';

export interface RuntimeOptions<S extends ConfigSpec> {
  /** Short service name: identity, projects, ... Names the database, the port variable and logs. */
  name: string;
  defaultPort: number;
  /** Settings of this service beyond the common ones. */
  config?: S;
  collections: Array<CollectionDef<any>>;
  env?: NodeJS.ProcessEnv;
}

/** How long a client keeps one connection to a replica (see GrpcServerOptions.maxConnectionAgeMs). */
const connectionAgeConfig = {
  grpcMaxConnectionAgeMs: field('GRPC_MAX_CONNECTION_AGE_MS', 'int', {
    default: String(DEFAULT_MAX_CONNECTION_AGE_MS),
    min: 0,
    max: 86_400_000,
  }),
  grpcMaxConnectionAgeGraceMs: field('GRPC_MAX_CONNECTION_AGE_GRACE_MS', 'int', {
    default: String(DEFAULT_MAX_CONNECTION_AGE_GRACE_MS),
    min: 0,
    max: 86_400_000,
  }),
  /** Unary calls between services of one process skip the loopback socket (GrpcServerOptions.inProcess). */
  grpcInProcess: field('GRPC_IN_PROCESS', 'bool', { default: 'true' }),
};

/** Everything a service process owns: built once at start, closed once at stop. */
export interface ServiceRuntime<S extends ConfigSpec> {
  name: string;
  config: ConfigOf<typeof commonConfig> & ConfigOf<typeof connectionAgeConfig> & { port: number } & ConfigOf<S>;
  logger: Logger;
  store: Store;
  bus: EventBus;
  relay: OutboxRelay;
  box: SecretBox;
  /**
   * Calls `hint` soon after any replica commits to the store (`Store.watchWrites`), and returns the function that
   * stops. For work that other replicas' writes create (the outbox relay, feed notifiers).
   */
  wake: (hint: () => void) => () => void;
}

export async function openRuntime<S extends ConfigSpec>(options: RuntimeOptions<S>): Promise<ServiceRuntime<S>> {
  // eslint-disable-next-line no-restricted-properties -- the process entry's environment is the default
  const env = options.env ?? process.env;
  const spec = {
    ...commonConfig,
    ...connectionAgeConfig,
    port: field(`${options.name.toUpperCase()}_PORT`, 'int', { default: String(options.defaultPort), min: 0, max: 65535 }),
    ...(options.config ?? {}),
  };
  const config = loadConfig(spec, env) as ServiceRuntime<S>['config'];
  const topics = kafkaTopicSettings(config);
  const logger = createLogger(options.name, config.logLevel);
  const sqlitePath = `${config.dataDir}/${options.name}.db`;
  const store = await openStore({
    mongodbUri: mongoUriFor(options.name, env),
    mongodbOpTimeoutMs: config.mongodbOpTimeoutMs,
    dbName: `svc_${options.name}`,
    sqlitePath,
    // MongoDB: an index replaced because its definition changed, or one no definition declares any more.
    onIndexReport: (message, details) => logger.warn(details, message),
  });
  for (const def of [...options.collections, ...OUTBOX_COLLECTIONS, feedHeads, idempotency] as Array<CollectionDef<any>>)
    await store.ensure(def);
  const bus = openBus({
    kafkaBrokers: config.kafkaBrokers?.length ? config.kafkaBrokers : undefined,
    kafkaSecurity: kafkaSecurity(config),
    clientId: `svc-${options.name}`,
    embeddedPath: `${config.dataDir}/bus.db`,
    maxAttempts: config.busMaxAttempts,
    kafkaPartitions: topics.numPartitions,
    kafkaReplicationFactor: topics.replicationFactor,
    kafkaMinInsyncReplicas: topics.minInsyncReplicas,
    kafkaCreateTopics: topics.createTopics,
    kafkaNamespace: config.kafkaNamespace,
    kafkaSessionTimeoutMs: config.kafkaSessionTimeoutMs,
    retryMaxMs: config.busRetryMaxMs,
    // Logged and counted; a failing handler is retried: without limit on an unavailable dependency, a poison message
    // until its attempts are spent (then it is set aside as a dead letter).
    onError: (err: unknown, message?: { id: string; topic: string }) =>
      logger.warn({ err, eventId: message?.id, topic: message?.topic }, 'event bus error'),
  });
  const wake = (hint: () => void) => store.watchWrites(hint);
  // On SQLite, replicas wake each other's relay with a signal file when they add to the outbox: following every commit
  // to the store woke each replica for each of its siblings' writes (a chat reply's, say). MongoDB's change stream
  // (`wake`) tells of every write either way.
  const outboxSignal = store.kind === 'sqlite' ? `${sqlitePath}-signals/outbox` : null;
  const relay = new OutboxRelay(store, bus, {
    onError: (err: unknown) => logger.warn({ err }, 'outbox relay failed; will retry'),
    // Other replicas' records wake the relay, so its safety poll can be slow.
    wake: outboxSignal ? (hint) => watchSignal(outboxSignal, hint) : wake,
    announce: outboxSignal ? () => sendSignal(outboxSignal) : undefined,
  });
  const box = loadSecretBox(config.masterKey, config.dataDir, config.nodeEnv === 'production');
  return { name: options.name, config, logger, store, bus, relay, box, wake };
}

/** How long a store or bus ping may take before the health check counts it as down. */
const HEALTH_PROBE_MS = 800;

const withTimeout = (work: Promise<void>) => withDeadline(work, HEALTH_PROBE_MS, `no answer within ${HEALTH_PROBE_MS} ms`);

/** Runs `probe` when asked, at most once a second; callers meanwhile share the run in flight or the last result. */
function atMostOncePerSecond(probe: () => Promise<void>): () => Promise<void> {
  let last = -Infinity;
  let running: Promise<void> | null = null;
  return () => {
    if (performance.now() - last < 1000) return Promise.resolve();
    return (running ??= probe().finally(() => {
      last = performance.now();
      running = null;
    }));
  };
}

/** The health name that reports whether a service reaches its bus (the service itself stays SERVING). */
export const BUS_HEALTH = 'svc.bus';
/**
 * The health name that reports whether the service's consumers move: NOT_SERVING while a handler keeps failing on an
 * unavailable dependency (its partition waits; nothing is dead-lettered). The service itself stays SERVING.
 */
export const CONSUMERS_HEALTH = 'svc.consumers';

export interface RunningService {
  port: number;
  /** The METRICS_PORT listener's port, when there is one. */
  metricsPort?: number;
  /**
   * Rejects when the service cannot go on as configured (a subscription to a topic that is missing and must not be
   * created): the process entry then stops it and exits non-zero. Never resolves.
   */
  failed?: Promise<never>;
  stop(): Promise<void>;
}

/**
 * Serves the registrations over gRPC with health reporting (store and bus reachability measured when asked),
 * starts the outbox relay, then subscribes the consumers in the background, and returns a handle whose stop()
 * drains gracefully: health NOT_SERVING, in-flight calls finished, consumers stopped, outbox flushed, connections
 * closed.
 */
export async function serve<S extends ConfigSpec>(
  rt: ServiceRuntime<S>,
  options: {
    verifier: JwtVerifier;
    registrations: Array<ServiceRegistration<object>>;
    healthNames: string[];
    /**
     * The service's consumers. Subscribed after the server listens, retrying with backoff until the bus takes them:
     * a broker outage at start-up leaves the service serving, and BUS_HEALTH NOT_SERVING until every one runs.
     * Stopped before `onStop`.
     */
    subscriptions?: SubscribeOptions[];
    /** Before the server drains: end calls that never end by themselves (watch streams). */
    beforeStop?: () => void;
    onStop?: () => Promise<void>;
  },
): Promise<RunningService> {
  const server = new GrpcServer({
    host: rt.config.host,
    port: rt.config.port,
    logger: rt.logger,
    verifier: options.verifier,
    healthNames: options.healthNames,
    maxConnectionAgeMs: rt.config.grpcMaxConnectionAgeMs,
    maxConnectionAgeGraceMs: rt.config.grpcMaxConnectionAgeGraceMs,
    inProcess: rt.config.grpcInProcess,
  });
  for (const r of options.registrations) server.add(r);
  rt.relay.start();
  const port = await server.start();
  // Every service keeps Idempotency-Key records in its store: those past their 24 h are swept hourly.
  const keys = idempotencyRetention(rt.store, rt.logger);
  keys.start();
  // The store decides whether this replica takes traffic. The bus does not: the outbox buffers writes while it is
  // away, so a bus outage leaves every replica SERVING and is reported on its own health name (BUS_HEALTH), which
  // the gateway's /readyz names.
  let storeUp = true;
  let busUp = true;
  // Why the bus is down, for /readyz (sent with BUS_HEALTH's Check answer): the last failed probe's cause, or the
  // last failed subscription's.
  let busProblem: string | undefined;
  let subscribeProblem: string | undefined;
  const problemOf = (err: unknown) => (rt.bus.kind === 'kafka' ? connectionProblem('Kafka', err).reason : undefined);
  // Measured when a health Check asks (the gateway's /readyz, Kubernetes' probes), at most once a second, never by a
  // timer: an idle service does nothing. A probe that hangs counts as down after HEALTH_PROBE_MS. Each name waits
  // only for its own probe: the whole server's status ('', what Kubernetes probes) never waits for a broker that
  // does not answer, so a bus outage cannot fail a readiness probe's timeout.
  const probeStore = atMostOncePerSecond(() =>
    withTimeout(untraced(() => rt.store.ping())).then(
      () => setStore(true),
      (err) => {
        if (storeUp) rt.logger.error({ err }, 'store unreachable');
        setStore(false);
      },
    ),
  );
  const probeBus = atMostOncePerSecond(() =>
    withTimeout(untraced(() => rt.bus.ping())).then(
      () => setBus(true),
      (err) => {
        busProblem = problemOf(err);
        if (busUp) rt.logger.error({ err, reason: busProblem }, 'bus unreachable: writes wait in the outbox');
        setBus(false);
      },
    ),
  );
  // Whether a consumer is stalled on an unavailable dependency is known in memory: no I/O to wait for.
  const probeConsumers = () => {
    setConsumers();
    return Promise.resolve();
  };
  server.refreshHealth = (service) =>
    service === BUS_HEALTH ? probeBus() : service === CONSUMERS_HEALTH ? probeConsumers() : probeStore();
  let consumersMoving = true;
  server.health.setStatus(CONSUMERS_HEALTH, 'SERVING');
  function setStore(ok: boolean) {
    if (ok === storeUp) return;
    storeUp = ok;
    for (const name of ['', ...options.healthNames]) server.health.setStatus(name, ok ? 'SERVING' : 'NOT_SERVING');
  }
  function setConsumers() {
    const stalled = rt.bus.stalled();
    const ok = stalled.length === 0;
    if (ok === consumersMoving) return;
    consumersMoving = ok;
    if (!ok) rt.logger.error({ stalled }, 'a consumer is stalled on an unavailable dependency: its messages wait');
    server.health.setStatus(CONSUMERS_HEALTH, ok ? 'SERVING' : 'NOT_SERVING');
  }
  function setBus(ok: boolean) {
    if (ok === busUp) return;
    busUp = ok;
    showBus();
  }
  // The bus is healthy when it answers and every consumer runs: until then events wait (in the outbox, or on the
  // bus for this service's consumers), and /readyz names this service's bus.
  const consumers = (options.subscriptions ?? []).map(
    (subscribe) =>
      new BackgroundSubscription(rt.bus, subscribe, {
        onRetry: (err, attempt, delayMs) => {
          subscribeProblem = problemOf(err);
          rt.logger.warn({ err, group: subscribe.group, attempt, retryInMs: delayMs }, 'bus subscription failed; retrying');
        },
        onSubscribed: () => {
          rt.logger.info({ group: subscribe.group, topics: subscribe.topics }, 'subscribed to the bus');
          showBus();
        },
        isFatal: (err) => err instanceof MissingTopicsError,
      }),
  );
  function showBus() {
    const ok = busUp && consumers.every((c) => c.subscribed);
    server.health.setStatus(BUS_HEALTH, ok ? 'SERVING' : 'NOT_SERVING');
  }
  server.healthReason = (service) => {
    if (service !== BUS_HEALTH) return undefined;
    if (!busUp) return busProblem;
    return consumers.every((c) => c.subscribed) ? undefined : subscribeProblem;
  };
  showBus();
  for (const c of consumers) c.start();
  const failed = Promise.race(consumers.map((c) => c.failed));
  failed.catch(() => {});
  const exporter = rt.config.metricsPort === undefined ? null : await serveMetrics(rt.config.metricsPort, rt.config.metricsHost);
  rt.logger.info({ port, metricsPort: exporter?.port }, `${rt.name} service listening`);
  let stopped: Promise<void> | null = null;
  return {
    port,
    metricsPort: exporter?.port,
    failed,
    // Idempotent: a second call waits for the first.
    stop: () =>
      (stopped ??= (async () => {
        exporter?.server.close();
        options.beforeStop?.();
        await server.stop();
        await Promise.all(consumers.map((c) => c.stop()));
        await options.onStop?.();
        await keys.stop();
        await rt.relay.stop();
        await rt.bus.close();
        await rt.store.close();
      })()),
  };
}

/** Adapts a JWKS-as-JSON fetcher (identity's GetJwks) to the verifier's key source. */
export function jwksFrom(fetch: () => Promise<string>): () => Promise<JSONWebKeySet> {
  return async () => JSON.parse(await fetch()) as JSONWebKeySet;
}

/**
 * The process entry for a service: start it, tell a parent launcher (IPC) the port, stop gracefully on
 * SIGTERM/SIGINT, and exit with a clear message on bad configuration.
 */
export function runMain(name: string, start: () => Promise<RunningService>): void {
  // A promise nobody awaited failed: a bug to log, not a reason to drop every other tenant's calls (Node's default
  // ends the process). Uncaught exceptions keep Node's default (the state is unknown); the launcher or Kubernetes
  // restarts the process.
  process.on('unhandledRejection', (reason) =>
    console.error(JSON.stringify({ level: 50, service: name, msg: 'unhandled rejection', err: String(reason) })),
  );
  start().then(
    (svc) => {
      process.send?.({ type: 'ready', name, port: svc.port });
      let stopping = false;
      const shutdown = (code = 0) => {
        if (stopping) return;
        stopping = true;
        // Drained first, so the spans of the last calls are among those flushed (bounded: FLUSH_TIMEOUT_MS).
        const exit = (status: number) => void flushTelemetry().then(() => process.exit(status));
        svc.stop().then(
          () => exit(code),
          () => exit(1),
        );
      };
      process.on('SIGTERM', () => shutdown());
      process.on('SIGINT', () => shutdown());
      // Started by a launcher: stop with it, even when it dies without a word.
      if (process.send) process.on('disconnect', () => shutdown());
      // Misconfigured in a way found only once the bus answered (a topic missing): stop, and say why.
      svc.failed?.catch((err: unknown) => {
        console.error(`${name}: cannot run: ${err instanceof Error ? err.message : String(err)}`);
        shutdown(1);
      });
    },
    (err: unknown) => {
      if (err instanceof ConfigError) console.error(`${name}: ${err.message}`);
      else console.error(`${name}: failed to start:`, err);
      process.exit(isPortInUse(err) ? EXIT_PORT_IN_USE : 1);
    },
  );
}
