import { ConfigError } from '@svc/kit';
import { DEFAULT_CATALOGUE, parseCatalogue } from './config';
import { applyPreferences, Catalogue, defaultPreferences } from './rules';

describe('REGIONS_CATALOGUE', () => {
  it('defaults to the five regions of the contract', () => {
    expect(parseCatalogue(undefined).map((r) => r.id)).toEqual(['us-east', 'us-west', 'eu-west', 'eu-central', 'ap-southeast']);
  });

  it('reads a catalogue from JSON, available unless said otherwise', () => {
    const c = parseCatalogue(
      '[{"id":"ca-central","name":"Canada","jurisdiction":"CA"},{"id":"eu-north","name":"Stockholm","jurisdiction":"EU","available":false}]',
    );
    expect(c).toEqual([
      { id: 'ca-central', name: 'Canada', jurisdiction: 'CA', available: true },
      { id: 'eu-north', name: 'Stockholm', jurisdiction: 'EU', available: false },
    ]);
  });

  it.each([
    'not json',
    '[]',
    '{}',
    '[{"id":"UPPER","name":"x","jurisdiction":"US"}]',
    '[{"id":"ok-1","jurisdiction":"US"}]',
    '[{"id":"dup","name":"a","jurisdiction":"US"},{"id":"dup","name":"b","jurisdiction":"US"}]',
  ])('stops the process on %s', (raw) => {
    expect(() => parseCatalogue(raw)).toThrow(ConfigError);
  });
});

describe('preference rules on a configured catalogue', () => {
  const catalogue = new Catalogue([
    { id: 'ca-central', name: 'Canada', jurisdiction: 'CA', available: true },
    { id: 'eu-north', name: 'Stockholm', jurisdiction: 'EU', available: false },
    { id: 'eu-south', name: 'Milan', jurisdiction: 'EU', available: true },
  ]);

  it('defaults the primary region to the first available one when us-east is not offered', () => {
    expect(defaultPreferences(catalogue.regions).primaryRegion).toBe('ca-central');
    expect(defaultPreferences(DEFAULT_CATALOGUE).primaryRegion).toBe('us-east');
  });

  it('refuses a region that is not available', () => {
    const current = defaultPreferences(catalogue.regions);
    expect(() => applyPreferences(current, { primaryRegion: 'eu-north' }, 'enterprise', null, catalogue)).toThrow(
      expect.objectContaining({
        code: 'VALIDATION_ERROR',
        details: { fields: [{ field: 'primaryRegion', message: 'region eu-north is not available' }] },
      }),
    );
    expect(applyPreferences(current, { primaryRegion: 'eu-south' }, 'free', null, catalogue).primaryRegion).toBe('eu-south');
  });

  it('checks an unknown jurisdiction pairing like any other', () => {
    const current = { ...defaultPreferences(catalogue.regions), primaryRegion: 'eu-south' };
    expect(() => applyPreferences(current, { complianceLevel: 'hipaa' }, 'free', null, catalogue)).toThrow(
      expect.objectContaining({ details: expect.objectContaining({ reason: 'compliance_conflict' }) }),
    );
    expect(applyPreferences(current, { complianceLevel: 'gdpr' }, 'free', null, catalogue).complianceLevel).toBe('gdpr');
  });

  it('answers 400 before 403: an unknown secondary region on a free plan is a bad request', () => {
    const current = defaultPreferences(catalogue.regions);
    expect(() => applyPreferences(current, { secondaryRegion: 'nowhere' }, 'free', null, catalogue)).toThrow(
      expect.objectContaining({ code: 'VALIDATION_ERROR' }),
    );
    expect(() => applyPreferences(current, { secondaryRegion: 'eu-south' }, 'starter', null, catalogue)).toThrow(
      expect.objectContaining({ code: 'FORBIDDEN', details: { feature: 'secondary_region', requiredPlan: 'growth' } }),
    );
    expect(applyPreferences(current, { secondaryRegion: 'eu-south' }, 'growth', null, catalogue).secondaryRegion).toBe('eu-south');
  });
});
