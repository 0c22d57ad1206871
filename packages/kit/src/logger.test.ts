import { Writable } from 'node:stream';
import pino from 'pino';
import { REDACT_PATHS } from './logger';

it('never writes secrets, whatever the level', () => {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, done) {
      lines.push(chunk.toString());
      done();
    },
  });
  const log = pino({ level: 'trace', redact: { paths: REDACT_PATHS, censor: '[redacted]' } }, sink);
  log.info({ password: 'hunter22', body: { apiKey: 'sk-live-1', secret: 'whsec', name: 'kept' } }, 'sign-in');
  log.debug({ req: { headers: { authorization: 'Bearer svc_sdk_abc', cookie: 'svc_session=svc_sess_x', host: 'h' } } }, 'request');
  log.warn({ token: 'eyJhbGciOi', refreshToken: 'svc_rt_1', metadata: { authorization: 'Bearer jwt' } }, 'tokens');
  const out = lines.join('');
  for (const secret of ['hunter22', 'sk-live-1', 'whsec', 'svc_sdk_abc', 'svc_sess_x', 'eyJhbGciOi', 'svc_rt_1', 'Bearer jwt'])
    expect(out).not.toContain(secret);
  expect(out).toContain('kept');
  expect(out.match(/\[redacted\]/g)!.length).toBeGreaterThanOrEqual(8);
});
