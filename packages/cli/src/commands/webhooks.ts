/** Webhook endpoints (list, get, create, update, delete), their deliveries, a test event, secret rotation, recovery. */
import { apiPath } from '../api';
import { addDelete, addGet, addList, addWrite } from '../resource';
import type { CommandModule } from '.';

const events = (list?: string) =>
  list
    ?.split(',')
    .map((e) => e.trim())
    .filter(Boolean);
const webhookPath = ([id]: string[]) => apiPath`/webhooks/${id}`;

export const webhookCommands: CommandModule = (program, ctx) => {
  const webhooks = program.command('webhooks').description('Webhook endpoints, their deliveries, tests, secret rotation and recovery');
  addList(webhooks, ctx, {
    description: 'List webhook endpoints',
    path: () => '/webhooks',
    columns: [
      ['ID', 'id'],
      ['URL', 'url'],
      ['EVENTS', 'events'],
      ['ACTIVE', 'active'],
    ],
  });
  addGet(webhooks, ctx, { description: 'Show a webhook endpoint', path: webhookPath });
  addWrite(webhooks, ctx, {
    name: 'create <url>',
    description: 'Add an endpoint; without --secret a whsec_ secret is made and shown once',
    method: 'POST',
    path: () => '/webhooks',
    options: [
      ['-e, --events <types>', 'comma-separated event types (svc events types lists them)'],
      ['--secret <secret>', 'the signing secret (whsec_<base64>, or any text)'],
    ],
    body: ([url], o) => ({ url, events: events(o.events) ?? [], secret: o.secret }),
    human: (w) => `Created webhook ${w.id} (${w.url}).${w.secret ? ` Its secret, shown only once:\n${w.secret}` : ''}`,
  });
  addWrite(webhooks, ctx, {
    name: 'update <id>',
    description: 'Change an endpoint',
    method: 'PATCH',
    path: webhookPath,
    options: [
      ['--url <url>', 'new address'],
      ['-e, --events <types>', 'comma-separated event types'],
      ['--secret <secret>', 'new signing secret'],
      ['--enable', 'deliver to it again'],
      ['--disable', 'stop delivering to it'],
    ],
    body: (_, o) => ({ url: o.url, events: events(o.events), secret: o.secret, active: o.enable ? true : o.disable ? false : undefined }),
    human: (w) => `Updated webhook ${w.id} (${w.active ? 'active' : 'inactive'}).`,
  });
  addDelete(webhooks, ctx, { description: 'Delete an endpoint', noun: 'webhook', path: webhookPath });
  addList(webhooks, ctx, {
    name: 'deliveries <id>',
    isDefault: false,
    description: "List an endpoint's deliveries",
    path: ([id]) => apiPath`/webhooks/${id}/deliveries`,
    columns: [
      ['ID', 'id'],
      ['EVENT', 'eventType'],
      ['STATUS', 'status'],
      ['ATTEMPTS', 'attempts'],
      ['UPDATED', 'updatedAt'],
    ],
  });
  addWrite(webhooks, ctx, {
    name: 'test <id>',
    description: 'Send a test event to an endpoint',
    method: 'POST',
    path: ([id]) => apiPath`/webhooks/${id}/test`,
    body: () => undefined,
    human: (r) => `Sent a test event: ${JSON.stringify(r)}`,
  });
  addWrite(webhooks, ctx, {
    name: 'rotate-secret <id>',
    description: 'A new whsec_ secret (shown once); the old one keeps signing for the grace period',
    method: 'POST',
    path: ([id]) => apiPath`/webhooks/${id}/rotate-secret`,
    options: [['--grace-hours <hours>', 'how long the old secret keeps signing (default 24)']],
    body: (_, o) => ({ graceHours: o.graceHours === undefined ? undefined : Number(o.graceHours) }),
    human: (r) => `New secret, shown only once:\n${r.secret}\nThe old one signs until ${r.graceEndsAt ?? 'now'}.`,
  });
  addWrite(webhooks, ctx, {
    name: 'recover <id>',
    description: 'Deliver again the events of a time window to an endpoint',
    method: 'POST',
    path: ([id]) => apiPath`/webhooks/${id}/recover`,
    options: [
      ['--since <time>', 'ISO 8601: events created at or after it'],
      ['--until <time>', 'ISO 8601: events created before it (default: now)'],
    ],
    body: (_, o) => ({ since: o.since, until: o.until }),
    human: (r) => `Recovery started: ${JSON.stringify(r)}`,
  });
  addWrite(webhooks, ctx, {
    name: 'retry <id> <deliveryId>',
    description: 'Deliver one delivery again now',
    method: 'POST',
    path: ([id, deliveryId]) => apiPath`/webhooks/${id}/deliveries/${deliveryId}/retry`,
    body: () => undefined,
    human: (d) => `Delivery ${d.id}: ${d.status}.`,
  });
};
