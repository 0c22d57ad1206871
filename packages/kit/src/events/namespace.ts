/**
 * KAFKA_NAMESPACE: one Kafka cluster shared by several deployments (staging beside production, or test runs in
 * parallel). Topics and consumer groups get the namespace as a prefix on the wire; services keep using the plain
 * names, and received messages carry them.
 */
import { mapReceived, type EventBus } from './types';

/** A topic's (or group's) name on the wire in a namespace. */
export const namespaced = (namespace: string | undefined, name: string) => (namespace ? `${namespace}.${name}` : name);

export function withNamespace(bus: EventBus, namespace: string | undefined): EventBus {
  if (!namespace) return bus;
  const prefix = `${namespace}.`;
  const wire = (topic: string) => prefix + topic;
  const plain = (name: string) => (name.startsWith(prefix) ? name.slice(prefix.length) : name);
  return {
    kind: bus.kind,
    publish: (messages) => bus.publish(messages.map((m) => ({ ...m, topic: wire(m.topic) }))),
    subscribe: (options) =>
      bus.subscribe({
        ...mapReceived(options, (m) => ({ ...m, topic: plain(m.topic) })),
        group: prefix + options.group,
        topics: options.topics.map(wire),
      }),
    ping: () => bus.ping(),
    stalled: () => bus.stalled().map((c) => ({ ...c, topic: plain(c.topic), group: plain(c.group) })),
    close: () => bus.close(),
  };
}
