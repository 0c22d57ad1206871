import { Metadata } from '@grpc/grpc-js';
import { AppError, type AuthClaims, type CallContext } from '@svc/kit';
import { authed } from './authed';

const ctx = (scp?: string[]): CallContext => ({
  auth: { sub: 'usr_1', tid: 'ten_1', typ: 'api_key', role: 'owner', sid: 'key_1', scp } as AuthClaims,
  token: 'jwt',
  requestId: 'r',
  clientIp: null,
  metadata: new Metadata(),
});

describe('authed', () => {
  it('refuses a call without verified claims', () => {
    expect(() => authed({ ...ctx(), auth: null, token: null })).toThrow(expect.objectContaining({ code: 'UNAUTHORIZED' }));
  });

  it('lets an unscoped token do anything its role allows', () => {
    expect(authed(ctx(), 'projects:write').auth.tid).toBe('ten_1');
  });

  it('holds a scoped token to its scopes in the service as well', () => {
    expect(authed(ctx(['projects:read', 'projects:write']), 'projects:write').auth.sub).toBe('usr_1');
    let err: unknown;
    try {
      authed(ctx(['projects:read']), 'projects:write');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(AppError);
    expect(err).toMatchObject({ code: 'FORBIDDEN', details: { reason: 'missing_scope', requiredScope: 'projects:write' } });
  });

  it('refuses any scoped token where only an unscoped credential may act, and lets an unscoped one through', () => {
    expect(authed(ctx(), 'unscoped').auth.tid).toBe('ten_1');
    expect(() => authed(ctx(['projects:read', 'agents:write']), 'unscoped')).toThrow(
      expect.objectContaining({ code: 'FORBIDDEN', details: { reason: 'unscoped_credential_required' } }),
    );
    expect(() => authed(ctx([]), 'unscoped')).toThrow(expect.objectContaining({ code: 'FORBIDDEN' }));
  });
});
