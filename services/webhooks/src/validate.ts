import { EgressError, errors, parseIsoInstant, resolveAndCheck, type EgressPolicy, type FieldError, type IsoInstant } from '@svc/kit';
import { PUBLIC_EVENT_TYPES } from '@svc/contracts';
import { GRACE_HOURS } from './secrets';

export const LIMITS = { url: 2048, secretMin: 8, secretMax: 512 } as const;
const KNOWN = new Set<string>(PUBLIC_EVENT_TYPES);

/** Collects every problem of a create or update before answering, as the gateway does for schema errors. */
export class Checks {
  readonly problems: FieldError[] = [];

  async url(value: string, policy: EgressPolicy): Promise<string> {
    const url = value.trim();
    if (url.length === 0 || url.length > LIMITS.url) {
      this.problems.push({ field: 'url', message: `must be 1 to ${LIMITS.url} characters` });
      return url;
    }
    try {
      // Registration resolves the host for a clear answer now; delivery checks the address again at connect time.
      await resolveAndCheck(url, policy);
    } catch (err) {
      if (!(err instanceof EgressError)) throw err;
      this.problems.push({ field: 'url', message: err.message });
    }
    return url;
  }

  events(values: string[]): string[] {
    if (values.length === 0) this.problems.push({ field: 'events', message: 'must name at least one event' });
    values.forEach((v, i) => {
      if (!KNOWN.has(v))
        this.problems.push({ field: `events[${i}]`, message: `is not a known event; one of ${PUBLIC_EVENT_TYPES.join(', ')}` });
    });
    return [...new Set(values)];
  }

  /** One known event type (a filter). */
  eventType(field: string, value: string): string {
    if (!KNOWN.has(value)) this.fail(field, `is not a known event; one of ${PUBLIC_EVENT_TYPES.join(', ')}`);
    return value;
  }

  /** An ISO 8601 date or date-time with a zone; null (and a problem) when it is not one. */
  time(field: string, value: string, { required = false } = {}): IsoInstant | null {
    if (!value) {
      if (required) this.fail(field, 'is required');
      return null;
    }
    const instant = parseIsoInstant(value);
    if (!instant) this.fail(field, 'must be an ISO 8601 date-time with a time zone (2025-01-31T12:00:00.000Z)');
    return instant;
  }

  fail(field: string, message: string): void {
    this.problems.push({ field, message });
  }

  secret(value: string): string {
    if (value.length < LIMITS.secretMin || value.length > LIMITS.secretMax)
      this.problems.push({ field: 'secret', message: `must be ${LIMITS.secretMin} to ${LIMITS.secretMax} characters` });
    return value;
  }

  /** A rotation's grace period in milliseconds: 0 to GRACE_HOURS.max hours, fractions allowed; absent: the default. */
  graceMs(hours: number | undefined): number {
    const h = hours ?? GRACE_HOURS.default;
    if (!Number.isFinite(h) || h < 0 || h > GRACE_HOURS.max) this.fail('graceHours', `must be 0 to ${GRACE_HOURS.max} hours`);
    return Math.round(h * 3_600_000);
  }

  done(): void {
    if (this.problems.length) throw errors.validation(this.problems);
  }
}
