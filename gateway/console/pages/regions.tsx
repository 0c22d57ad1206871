// /settings/regions: where the tenant's data lives (spec 4.5). Regional preferences (primary region, a failover
// region where the plan has it, data residency, compliance level); file storage on the platform or in the tenant's
// own bucket (keys write-only, a connection test); and the routing this request got (served by, each service's health).
import { useState } from 'preact/hooks';
import { call, type Item } from '../sdk';
import { ErrorText, Form, Input, text, useAction, useLoad, when, type Me } from '../ui';

type Region = Item<'listRegions'>;
type Validation = Awaited<ReturnType<typeof validate>>;

const COMPLIANCE = ['standard', 'soc2', 'iso27001', 'pci_dss', 'gdpr', 'hipaa'];
const PROVIDERS = ['s3', 'r2', 'gcs', 'azure'];

/** The storage form's fields as the API's body: the chosen mode's fields that are filled (the keys are write-only). */
function storageBody(f: FormData) {
  const mode = text(f, 'storageMode') ?? 'platform';
  const fields =
    mode === 'platform'
      ? ['platformRegion']
      : ['byosProvider', 'byosEndpoint', 'byosBucket', 'byosRegion', 'byosAccessKey', 'byosSecretKey'];
  const body: Record<string, string> = { storageMode: mode };
  for (const name of fields) {
    const value = text(f, name);
    if (value) body[name] = value;
  }
  return body as any;
}

const validate = (tenantId: string, f: FormData) => call('validateStorageConfig', { params: { tenantId }, body: storageBody(f) });

function RegionSelect({
  id,
  name,
  label,
  regions,
  current,
  none,
}: {
  id: string;
  name: string;
  label: string;
  regions?: Region[];
  current?: string | null;
  none?: string;
}) {
  return (
    <p class="field">
      <label for={id}>{label}</label>
      <select id={id} name={name}>
        {none !== undefined && <option value="">{none}</option>}
        {regions?.map((r) => (
          <option value={r.id} selected={r.id === current} disabled={!r.available}>
            {`${r.name} (${r.id}, ${r.jurisdiction})`}
          </option>
        ))}
      </select>
    </p>
  );
}

export default function RegionsPage({ me }: { me: Me }) {
  const tenantId = me.tenant.id;
  const params = { tenantId };
  const data = useLoad(async () => {
    const [regions, preferences, storage, failover, routing] = await Promise.all([
      call('listRegions', {}),
      call('getRegionalPreferences', { params }),
      call('getStorageConfig', { params }),
      call('checkFeature', { params: { tenantId, featureKey: 'secondary_region' } }),
      call('getRoutingInfo', {}),
    ]);
    return { regions, preferences, storage, failover, routing };
  }, [tenantId]);
  const [status, setStatus] = useState('');
  const [checked, setChecked] = useState<Validation>();
  // Through useAction: its error shown under the form, and a 401 sends the visitor to sign in.
  const test = useAction(() => undefined);
  const d = data.data;
  if (data.error) return <ErrorText error={data.error} />;
  if (!d) return <p aria-busy="true">Loading…</p>;
  const p = d.preferences;
  const s = d.storage;
  return (
    <>
      <h1>Regions and storage</h1>
      <p role="status">{status}</p>
      <section aria-labelledby="preferences-title">
        <h2 id="preferences-title">Regional preferences</h2>
        <Form
          submit="Save preferences"
          onSubmit={async (f) => {
            await call('updateRegionalPreferences', {
              params,
              body: {
                primaryRegion: text(f, 'primaryRegion'),
                ...(d.failover.enabled ? { secondaryRegion: text(f, 'secondaryRegion') ?? null } : {}),
                dataResidencyRequired: f.get('dataResidencyRequired') === 'on',
                dataResidencyRegion: text(f, 'dataResidencyRegion') ?? null,
                complianceLevel: text(f, 'complianceLevel'),
              },
            });
            setStatus('Preferences saved.');
            await data.reload();
          }}
        >
          <RegionSelect id="primary-region" name="primaryRegion" label="Primary region" regions={d.regions} current={p.primaryRegion} />
          {d.failover.enabled ? (
            <RegionSelect
              id="secondary-region"
              name="secondaryRegion"
              label="Failover region"
              regions={d.regions}
              current={p.secondaryRegion}
              none="None"
            />
          ) : (
            <p>{`A failover region needs the ${d.failover.requiredPlan} plan (this tenant is on ${d.failover.plan}).`}</p>
          )}
          <p class="field">
            <label class="check">
              <input type="checkbox" name="dataResidencyRequired" checked={p.dataResidencyRequired} /> Data must stay in one region
            </label>
          </p>
          <RegionSelect
            id="residency-region"
            name="dataResidencyRegion"
            label="Residency region"
            regions={d.regions}
            current={p.dataResidencyRegion}
            none="Not set"
          />
          <p class="field">
            <label for="compliance-level">Compliance level</label>
            <select id="compliance-level" name="complianceLevel">
              {COMPLIANCE.map((c) => (
                <option value={c} selected={c === p.complianceLevel}>
                  {c}
                </option>
              ))}
            </select>
          </p>
        </Form>
      </section>
      <section aria-labelledby="storage-title">
        <h2 id="storage-title">File storage</h2>
        <p>
          {s.byosCredentialsSet
            ? `Keys are stored (access key ending ${s.byosAccessKeyLast4 ?? '…'}); leave them empty to keep them.`
            : 'No bucket keys are stored.'}
        </p>
        <Form
          submit="Save storage"
          onSubmit={async (f) => {
            await call('putStorageConfig', { params, body: storageBody(f) });
            setStatus('Storage saved.');
            await data.reload();
          }}
        >
          <p class="field">
            <label for="storage-mode">Storage</label>
            <select id="storage-mode" name="storageMode">
              <option value="platform" selected={s.storageMode === 'platform'}>
                platform
              </option>
              <option value="byos" selected={s.storageMode === 'byos'}>
                your own bucket (byos)
              </option>
            </select>
          </p>
          <RegionSelect
            id="platform-region"
            name="platformRegion"
            label="Platform region"
            regions={d.regions}
            current={s.platformRegion}
            none="The primary region"
          />
          <p class="field">
            <label for="byos-provider">Bucket provider</label>
            <select id="byos-provider" name="byosProvider">
              <option value="">—</option>
              {PROVIDERS.map((v) => (
                <option value={v} selected={v === s.byosProvider}>
                  {v}
                </option>
              ))}
            </select>
          </p>
          <Input id="byos-endpoint" name="byosEndpoint" label="Endpoint" defaultValue={s.byosEndpoint ?? ''} maxLength={2000} />
          <Input id="byos-bucket" name="byosBucket" label="Bucket" defaultValue={s.byosBucket ?? ''} maxLength={63} />
          <Input id="byos-region" name="byosRegion" label="Bucket region" defaultValue={s.byosRegion ?? ''} maxLength={64} />
          <Input id="byos-access-key" name="byosAccessKey" label="Access key" autoComplete="off" maxLength={1000} />
          <Input id="byos-secret-key" name="byosSecretKey" label="Secret key" type="password" autoComplete="off" maxLength={1000} />
          <p>
            <button
              type="button"
              class="secondary"
              onClick={(e) => {
                const form = (e.currentTarget as HTMLButtonElement).form!;
                void test.act(
                  () =>
                    validate(tenantId, new FormData(form)).then(setChecked, (err: unknown) => {
                      setChecked(undefined);
                      throw err;
                    }),
                  '',
                );
              }}
            >
              Test connection
            </button>
          </p>
        </Form>
        <ErrorText error={test.error} />
        {checked && (
          <ul aria-label="Connection test">
            {checked.checks.map((c) => (
              <li key={c.name}>{`${c.ok ? 'ok' : 'failed'}: ${c.name}${c.message ? ` (${c.message})` : ''}`}</li>
            ))}
          </ul>
        )}
      </section>
      <section aria-labelledby="routing-title">
        <h2 id="routing-title">Routing</h2>
        <dl class="facts">
          <dt>Served by</dt>
          <dd>{`${d.routing.servedBy.instanceId} in ${d.routing.servedBy.region}`}</dd>
          <dt>Stored files</dt>
          <dd>{d.routing.regions?.storage ?? '—'}</dd>
          {d.routing.services.map((svc) => (
            <>
              <dt>{svc.name}</dt>
              <dd>{`${svc.status}, checked ${when(svc.checkedAt)}`}</dd>
            </>
          ))}
        </dl>
      </section>
    </>
  );
}
