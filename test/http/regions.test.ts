import { client, createKey, eventually, expectError, signUp, type Account, type Client } from '../helpers/http';
import { planChanged, publish } from '../helpers/plan-events';
import { startStack, type Stack } from '../helpers/stack';

let stack: Stack;
let api: Client;
let owner: Account;
let t: { token: string };
const prefsPath = () => `/api/v1/regions/preferences/${owner.tenantId}`;
const feature = (key: string, who: Account = owner) => `/api/v1/regions/features/${who.tenantId}/check/${key}`;

beforeAll(async () => {
  stack = await startStack({ env: { REGION: 'eu-west' } });
  api = client(stack.url);
  owner = await signUp(api, 'Regional');
  t = { token: owner.accessToken };
});
afterAll(() => stack.stop());

it('lists the region catalogue', async () => {
  const res = await api.get('/api/v1/regions', t);
  expect(res.status).toBe(200);
  const ids = res.body.data.map((r: { id: string }) => r.id);
  expect(ids).toEqual(expect.arrayContaining(['us-east', 'us-west', 'eu-west', 'eu-central', 'ap-southeast']));
  for (const r of res.body.data)
    expect(r).toEqual({ id: expect.any(String), name: expect.any(String), jurisdiction: expect.any(String), available: true });
});

describe('preferences', () => {
  it('start with the contract’s defaults', async () => {
    const res = await api.get(prefsPath(), t);
    expect(res.body.data).toEqual({
      primaryRegion: 'us-east',
      secondaryRegion: null,
      dataResidencyRequired: false,
      dataResidencyRegion: null,
      complianceLevel: 'standard',
    });
  });

  it('change partially and keep the rest', async () => {
    const res = await api.patch(prefsPath(), { primaryRegion: 'us-west' }, t);
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ primaryRegion: 'us-west', complianceLevel: 'standard', secondaryRegion: null });
    expect((await api.patch(prefsPath(), { complianceLevel: 'soc2' }, t)).body.data).toMatchObject({
      primaryRegion: 'us-west',
      complianceLevel: 'soc2',
    });
  });

  it('refuse an unknown region or compliance level with 400 and change nothing', async () => {
    const before = (await api.get(prefsPath(), t)).body.data;
    for (const [body, field] of [
      [{ primaryRegion: 'mars-1' }, 'primaryRegion'],
      [{ secondaryRegion: 'mars-1' }, 'secondaryRegion'],
      [{ dataResidencyRegion: 'atlantis' }, 'dataResidencyRegion'],
      [{ complianceLevel: 'whatever' }, 'complianceLevel'],
      [{ complianceLevel: 'constructor' }, 'complianceLevel'],
    ] as const) {
      const err = expectError(await api.patch(prefsPath(), body, t), 400, 'VALIDATION_ERROR');
      expect(err.details.fields.map((f: { field: string }) => f.field)).toEqual([field]);
    }
    expectError(await api.patch(prefsPath(), { primaryRegion: null }, t), 400, 'VALIDATION_ERROR');
    expect((await api.get(prefsPath(), t)).body.data).toEqual(before);
  });

  it('check residency and compliance against where the data would live', async () => {
    // Residency needs a region, and then every place of the data in its jurisdiction.
    let err = expectError(await api.patch(prefsPath(), { dataResidencyRequired: true }, t), 400, 'VALIDATION_ERROR');
    expect(err.details.fields[0].field).toBe('dataResidencyRegion');
    err = expectError(
      await api.patch(prefsPath(), { dataResidencyRequired: true, dataResidencyRegion: 'eu-west', primaryRegion: 'us-east' }, t),
      400,
      'VALIDATION_ERROR',
    );
    expect(err.details.reason).toBe('residency_conflict');
    expect(err.details.fields).toEqual([{ field: 'primaryRegion', message: expect.stringContaining('EU') }]);
    // In the same jurisdiction it is fine; then moving the primary region out of it is refused.
    const ok = await api.patch(
      prefsPath(),
      { dataResidencyRequired: true, dataResidencyRegion: 'eu-west', primaryRegion: 'eu-central' },
      t,
    );
    expect(ok.status).toBe(200);
    expect(expectError(await api.patch(prefsPath(), { primaryRegion: 'ap-southeast' }, t), 400, 'VALIDATION_ERROR').details.reason).toBe(
      'residency_conflict',
    );
    // gdpr keeps data in the EU, hipaa in the US.
    expect((await api.patch(prefsPath(), { complianceLevel: 'gdpr' }, t)).status).toBe(200);
    err = expectError(await api.patch(prefsPath(), { complianceLevel: 'hipaa', dataResidencyRequired: false }, t), 400, 'VALIDATION_ERROR');
    expect(err.details.reason).toBe('compliance_conflict');
    const back = await api.patch(
      prefsPath(),
      { complianceLevel: 'standard', dataResidencyRequired: false, dataResidencyRegion: null, primaryRegion: 'us-east' },
      t,
    );
    expect(back.body.data).toMatchObject({ dataResidencyRequired: false, dataResidencyRegion: null, primaryRegion: 'us-east' });
  });

  it('gate the secondary region on the growth plan; a plan change through the event then allows it', async () => {
    const err = expectError(await api.patch(prefsPath(), { secondaryRegion: 'us-west' }, t), 403, 'FORBIDDEN');
    expect(err.details).toEqual({ feature: 'secondary_region', requiredPlan: 'growth' });
    // Clearing is not using the feature; a secondary equal to the primary is a bad request before any plan question.
    expect((await api.patch(prefsPath(), { secondaryRegion: null }, t)).status).toBe(200);
    expectError(await api.patch(prefsPath(), { secondaryRegion: 'us-east' }, t), 400, 'VALIDATION_ERROR');

    await publish(stack, planChanged(owner.tenantId, 'starter'));
    await eventually(async () => (await api.get(feature('agents'), t)).body.data.plan === 'starter');
    expectError(await api.patch(prefsPath(), { secondaryRegion: 'us-west' }, t), 403, 'FORBIDDEN');

    await publish(stack, planChanged(owner.tenantId, 'growth', 'starter'));
    await eventually(async () => (await api.get(feature('secondary_region'), t)).body.data.enabled === true);
    const res = await api.patch(prefsPath(), { secondaryRegion: 'us-west' }, t);
    expect(res.status).toBe(200);
    expect(res.body.data.secondaryRegion).toBe('us-west');
    expect((await api.get('/api/v1/routing-info', t)).body.data.regions.secondary).toBe('us-west');

    await publish(stack, planChanged(owner.tenantId, 'enterprise', 'growth'));
    await eventually(async () => (await api.get(feature('sso'), t)).body.data.enabled === true);
    expect((await api.get(feature('agents'), t)).body.data.plan).toBe('enterprise');

    // A downgrade keeps the stored choice but takes it out of effect.
    await publish(stack, planChanged(owner.tenantId, 'free', 'enterprise'));
    await eventually(async () => (await api.get(feature('secondary_region'), t)).body.data.enabled === false);
    expect((await api.get(prefsPath(), t)).body.data.secondaryRegion).toBe('us-west');
    expect((await api.get('/api/v1/routing-info', t)).body.data.regions.secondary).toBeNull();
  });
});

describe('feature check', () => {
  it('answers from the entitlements table for the tenant’s plan', async () => {
    const fresh = await signUp(api, 'Fresh');
    const expected: Record<string, [boolean, string]> = {
      agents: [true, 'free'],
      chat: [true, 'free'],
      webhooks: [true, 'free'],
      ip_allowlist: [true, 'free'],
      byos_storage: [true, 'free'],
      data_residency: [true, 'free'],
      secondary_region: [false, 'growth'],
      sso: [false, 'enterprise'],
    };
    for (const [key, [enabled, requiredPlan]] of Object.entries(expected)) {
      const res = await api.get(feature(key, fresh), { token: fresh.accessToken });
      expect(res.body.data).toEqual({ featureKey: key, enabled, plan: 'free', requiredPlan });
    }
  });

  it('answers 404 for an unknown key and for another tenant', async () => {
    for (const key of ['teleport', 'constructor', '__proto__', 'SSO']) {
      const err = expectError(await api.get(feature(key), t), 404, 'RESOURCE_NOT_FOUND');
      expect(err.details).toEqual({ resource: 'feature', id: key });
    }
    const other = await signUp(api, 'Other');
    const err = expectError(await api.get(feature('agents', other), t), 404, 'RESOURCE_NOT_FOUND');
    expect(err.details).toEqual({ resource: 'tenant', id: other.tenantId });
  });
});

describe('access', () => {
  it('needs a credential without a scope list, and the owner or admin role to change anything', async () => {
    const scoped = await createKey(api, owner.accessToken, { scopes: ['projects:read'] });
    for (const path of [
      '/api/v1/regions',
      prefsPath(),
      feature('agents'),
      '/api/v1/routing-info',
      `/api/v1/regions/storage/${owner.tenantId}`,
    ])
      expect(expectError(await api.get(path, { token: scoped.key }), 403, 'FORBIDDEN').details.reason).toBe('unscoped_credential_required');
    const unscoped = await createKey(api, owner.accessToken);
    expect((await api.get(feature('agents'), { token: unscoped.key })).status).toBe(200);

    const email = `member${Date.now()}@example.com`;
    await api.post('/api/v1/tenant/team/members', { email, name: 'M', role: 'member', password: 'password123' }, t);
    const member = (await api.post('/api/v1/auth/login', { email, password: 'password123' })).body.data.accessToken;
    expect((await api.get(prefsPath(), { token: member })).status).toBe(200);
    expectError(await api.patch(prefsPath(), { primaryRegion: 'us-west' }, { token: member }), 403, 'FORBIDDEN');
    expectError(
      await api.put(`/api/v1/regions/storage/${owner.tenantId}`, { storageMode: 'platform' }, { token: member }),
      403,
      'FORBIDDEN',
    );
  });
});

describe('routing info', () => {
  it('names the tenant’s regions, the instance and region that served it, and each service’s measured health', async () => {
    const res = await api.get('/api/v1/routing-info', t);
    expect(res.status).toBe(200);
    const data = res.body.data;
    expect(data.tenantId).toBe(owner.tenantId);
    expect(data.servedBy).toEqual({ instanceId: 'gw-0', region: 'eu-west' });
    expect(data.regions).toMatchObject({ primary: 'us-east', storage: expect.any(String) });
    expect(data.services.map((s: { name: string }) => s.name).sort()).toEqual(Object.keys(stack.services).sort());
    for (const s of data.services) {
      expect(s.status).toBe('up');
      expect(s.latencyMs).toBeGreaterThan(0);
    }
  });

  it('reports a stopped service as down', async () => {
    const own = await startStack();
    try {
      const a = client(own.url);
      const acct = await signUp(a, 'Down');
      await own.services.webhooks.stop();
      await eventually(async () => {
        const res = await a.get('/api/v1/routing-info', { token: acct.accessToken });
        return res.body.data.services.find((s: { name: string }) => s.name === 'webhooks').status === 'down';
      });
    } finally {
      await own.stop();
    }
  });
});
