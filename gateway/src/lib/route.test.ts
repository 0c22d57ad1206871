import { idParamsOf } from './route';

it('knows the resource each id parameter names', () => {
  expect(idParamsOf('/api/v1/projects/:id')).toEqual([['id', 'project']]);
  expect(idParamsOf('/api/v1/agents/:id/runs/:run_id/approve')).toEqual([
    ['id', 'agent'],
    ['run_id', 'run'],
  ]);
  expect(idParamsOf('/api/v1/webhooks/:id/deliveries/:deliveryId/retry')).toEqual([
    ['id', 'webhook'],
    ['deliveryId', 'delivery'],
  ]);
  expect(idParamsOf('/api/v1/tenant/team/members/:userId')).toEqual([['userId', 'member']]);
  expect(idParamsOf('/api/v1/chat/sessions/:id/stream')).toEqual([['id', 'chat_session']]);
  // Names are not ids: secrets and feature keys keep their own rules.
  expect(idParamsOf('/api/v1/secrets/:name')).toEqual([]);
  expect(idParamsOf('/api/v1/regions/features/:tenantId/check/:featureKey')).toEqual([['tenantId', 'tenant']]);
});
