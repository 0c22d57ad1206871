/**
 * A real Apache Kafka broker (KRaft, single node, loopback) for the test suite and `npm run kafka:local`.
 *
 * The jars come from Maven Central through `test/kafka/pom.xml` (Maven's local cache makes later runs fast; the
 * classpath it reports is kept beside the pom's hash). Each broker formats its own log directory in a temp folder,
 * listens on free loopback ports, and is stopped by its PID. Where `java` or `mvn` is missing, the Debian packages
 * are installed when running as root; otherwise it stops at once naming them. It never lets a suite skip silently.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { reservablePort } from '@svc/kit';
import { mavenClasspath } from '../helpers/maven';

const POM = resolve(__dirname, 'pom.xml');
const CACHE_DIR = resolve(__dirname, '../../node_modules/.cache/svc-kafka');

/** The broker's classpath: Maven resolves it once per pom version; later calls read the kept answer. */
export function brokerClasspath(): string {
  return mavenClasspath(POM, CACHE_DIR, 'the Kafka broker');
}

export interface KafkaBroker {
  /** `127.0.0.1:PORT`, for KAFKA_BROKERS. */
  brokers: string;
  port: number;
  /** The SASL_SSL listener's `127.0.0.1:PORT`, when started with `secure`. */
  secureBrokers?: string;
  dataDir: string;
  pid: number;
  /** Whether the process is running. */
  readonly running: boolean;
  /** SIGTERM, then SIGKILL after `graceMs`; the data stays (start() again resumes on it). */
  stop(graceMs?: number): Promise<void>;
  /** Starts the broker again on the same ports and data (after stop()). */
  start(): Promise<void>;
  /** stop() and remove the data directory. */
  destroy(): Promise<void>;
}

export interface StartBrokerOptions {
  port?: number;
  /** Kept across stop()/start(); a fresh temp folder by default (removed by destroy()). */
  dataDir?: string;
  /** destroy() removes `dataDir` too (it is a temp folder of the caller's). */
  ownsDataDir?: boolean;
  /** Output of the broker process (default: dropped, except the last lines on a failed start). */
  log?: (line: string) => void;
  startTimeoutMs?: number;
  /** A SASL_SSL listener beside the PLAINTEXT one (which every other client keeps using). */
  secure?: SecureListener;
  /** false: ports taken and storage formatted, but not run until start() (a broker that is down from the first). */
  launch?: boolean;
}

/**
 * The SASL_SSL listener: TLS with a PEM key and certificate chain (Kafka reads PEM keystores since 2.7), and users
 * who may sign in with SCRAM-SHA-256, SCRAM-SHA-512 (credentials stored in the cluster's metadata when it is
 * formatted) or PLAIN (listed in the listener's JAAS configuration).
 */
export interface SecureListener {
  /** One PEM file: the private key (PKCS#8, unencrypted) and the certificate chain. */
  keystoreFile: string;
  users: Array<{ name: string; password: string }>;
}

function canConnect(port: number): Promise<boolean> {
  return new Promise((ok) => {
    const socket = connect({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      ok(true);
    });
    socket.once('error', () => ok(false));
  });
}

/** JAAS option values are quoted strings. */
const jaasQuoted = (value: string) => JSON.stringify(value);

function secureProperties(secure: SecureListener | undefined): string[] {
  if (!secure) return [];
  const plainUsers = secure.users.map((u) => `user_${u.name}=${jaasQuoted(u.password)}`).join(' ');
  return [
    'sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512,PLAIN',
    'listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;',
    'listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;',
    `listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required ${plainUsers};`,
    'listener.name.sasl_ssl.ssl.keystore.type=PEM',
    `listener.name.sasl_ssl.ssl.keystore.location=${secure.keystoreFile}`,
  ];
}

/** `--add-scram` arguments of the format: the users' SCRAM credentials, stored in the cluster's first metadata. */
function scramArguments(secure: SecureListener | undefined): string[] {
  return (secure?.users ?? []).flatMap((u) =>
    ['SCRAM-SHA-256', 'SCRAM-SHA-512'].flatMap((m) => ['--add-scram', `${m}=[name=${u.name},password=${u.password}]`]),
  );
}

function properties(
  dataDir: string,
  port: number,
  controllerPort: number,
  securePort: number | undefined,
  secure?: SecureListener,
): string {
  const listeners = [`PLAINTEXT://127.0.0.1:${port}`, ...(securePort ? [`SASL_SSL://127.0.0.1:${securePort}`] : [])];
  return [
    'process.roles=broker,controller',
    'node.id=1',
    `controller.quorum.voters=1@127.0.0.1:${controllerPort}`,
    `listeners=${[...listeners, `CONTROLLER://127.0.0.1:${controllerPort}`].join(',')}`,
    `advertised.listeners=${listeners.join(',')}`,
    'controller.listener.names=CONTROLLER',
    'listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL',
    'inter.broker.listener.name=PLAINTEXT',
    ...secureProperties(secure),
    `log.dirs=${join(dataDir, 'log')}`,
    // One node: internal topics cannot have more replicas; few partitions make the first group join quick.
    'offsets.topic.replication.factor=1',
    'offsets.topic.num.partitions=6',
    'transaction.state.log.replication.factor=1',
    'transaction.state.log.min.isr=1',
    'group.initial.rebalance.delay.ms=0',
    // Services create their topics themselves (or deploy does): an implicit creation would hide a missing one.
    'auto.create.topics.enable=false',
    'num.partitions=1',
    'log.retention.hours=1',
  ].join('\n');
}

/** Formats a KRaft log directory and starts a single-node broker on free loopback ports. */
export async function startKafkaBroker(options: StartBrokerOptions = {}): Promise<KafkaBroker> {
  const classpath = brokerClasspath();
  const ownDir = !options.dataDir || options.ownsDataDir === true;
  const dataDir = options.dataDir ?? mkdtempSync(join(tmpdir(), 'svc-kafka-'));
  const port = options.port ?? (await reservablePort('127.0.0.1'));
  const controllerPort = await reservablePort('127.0.0.1', new Set([port]));
  const securePort = options.secure ? await reservablePort('127.0.0.1', new Set([port, controllerPort])) : undefined;
  const configPath = join(dataDir, 'server.properties');
  writeFileSync(configPath, properties(dataDir, port, controllerPort, securePort, options.secure));
  if (!existsSync(join(dataDir, 'log', 'meta.properties'))) {
    const format = spawnSync(
      'java',
      [
        '-cp',
        classpath,
        'kafka.tools.StorageTool',
        'format',
        '-t',
        randomUUID(),
        '-c',
        configPath,
        '--ignore-formatted',
        ...scramArguments(options.secure),
      ],
      {
        encoding: 'utf8',
      },
    );
    if (format.status !== 0) throw new Error(`kafka-storage format failed: ${format.stderr || format.stdout}`);
  }

  let proc: ChildProcess | null = null;
  let exited: Promise<void> = Promise.resolve();
  const tail: string[] = [];

  const launch = async () => {
    proc = spawn(
      'java',
      [
        '-Xmx512m',
        '-Xms64m',
        '-XX:+UseSerialGC',
        '-XX:TieredStopAtLevel=1',
        '-Djava.awt.headless=true',
        '-Dorg.slf4j.simpleLogger.defaultLogLevel=warn',
        '-cp',
        classpath,
        'kafka.Kafka',
        configPath,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    const p = proc;
    exited = new Promise((ok) => p.once('exit', () => ok()));
    const onData = (chunk: Buffer) => {
      for (const line of chunk.toString().split('\n')) {
        if (!line) continue;
        options.log?.(line);
        tail.push(line);
        if (tail.length > 40) tail.shift();
      }
    };
    p.stdout!.on('data', onData);
    p.stderr!.on('data', onData);
    const deadline = Date.now() + (options.startTimeoutMs ?? 60_000);
    while (Date.now() < deadline) {
      if (p.exitCode !== null) throw new Error(`the Kafka broker exited with ${p.exitCode}:\n${tail.join('\n')}`);
      if ((await canConnect(port)) && (!securePort || (await canConnect(securePort)))) return;
      await new Promise((r) => setTimeout(r, 100));
    }
    p.kill('SIGKILL');
    throw new Error(`the Kafka broker did not accept connections within its start timeout:\n${tail.join('\n')}`);
  };

  const stop = async (graceMs = 10_000) => {
    const p = proc as ChildProcess | null;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    p.kill('SIGTERM');
    const timer = setTimeout(() => p.kill('SIGKILL'), graceMs);
    await exited;
    clearTimeout(timer);
  };

  if (options.launch !== false) await launch();
  return {
    brokers: `127.0.0.1:${port}`,
    port,
    secureBrokers: securePort ? `127.0.0.1:${securePort}` : undefined,
    dataDir,
    get pid() {
      return (proc as ChildProcess | null)?.pid ?? 0;
    },
    get running() {
      const p = proc as ChildProcess | null;
      return !!p && p.exitCode === null && p.signalCode === null;
    },
    stop,
    start: launch,
    destroy: async () => {
      await stop();
      if (ownDir) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
