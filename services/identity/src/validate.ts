import { errors, type FieldError } from '@svc/kit';

const EMAIL = /^[^\s@]{1,64}@[^\s@]{1,255}\.[^\s@]{2,63}$/;

/** Collects field errors so one answer names every problem. */
export class Checks {
  private readonly fields: FieldError[] = [];

  email(field: string, value: string): string {
    const v = value.trim().toLowerCase();
    if (!EMAIL.test(v) || v.length > 254) this.fields.push({ field, message: 'must be a valid email address' });
    return v;
  }

  password(field: string, value: string): string {
    if (value.length < 8 || value.length > 200) this.fields.push({ field, message: 'must be 8 to 200 characters' });
    return value;
  }

  text(field: string, value: string, min: number, max: number): string {
    const v = value.trim();
    if (v.length < min || v.length > max) this.fields.push({ field, message: `must be ${min} to ${max} characters` });
    return v;
  }

  oneOf<T extends string>(field: string, value: string, allowed: readonly T[]): T {
    if (!allowed.includes(value as T)) this.fields.push({ field, message: `must be one of: ${allowed.join(', ')}` });
    return value as T;
  }

  fail(field: string, message: string): void {
    this.fields.push({ field, message });
  }

  done(): void {
    if (this.fields.length) throw errors.validation(this.fields);
  }
}
