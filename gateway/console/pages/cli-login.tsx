// /cli/login: the page `svc login` opens (CONTRACT 4, 7). A visitor who is not signed in signs in and comes back; the
// page shows the code the terminal shows, the CLI's version and platform, and Approve / Deny. What happened is then
// said in a heading that takes the focus, so a screen reader reads it.
import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, call, describe, toLogin, type Output } from '../sdk';
import { ErrorText, when, type Me } from '../ui';

type Info = Output<'getCliLoginInfo'>;
type View =
  | { kind: 'loading' }
  | { kind: 'request'; info: Info; me: Me }
  | { kind: 'outcome'; title: string; text: string }
  | { kind: 'failed'; error: string };

const status = (err: unknown) => (err instanceof ApiError ? err.status : 0);
const AGAIN = 'You can close this page and return to your terminal.';

async function load(loginId: string): Promise<View> {
  let me: Me;
  try {
    me = (await call('me', {})) as unknown as Me;
  } catch (err) {
    // Not signed in: sign in, then back to this same approval.
    if (status(err) === 401) toLogin();
    throw err;
  }
  let info: Info;
  try {
    info = await call('getCliLoginInfo', { query: { loginId } });
  } catch (err) {
    if (status(err) === 404)
      return { kind: 'outcome', title: 'Login request not found', text: 'It may have expired. Run svc login again.' };
    throw err;
  }
  if (info.status !== 'pending')
    return {
      kind: 'outcome',
      title: 'This login request is no longer waiting',
      text: `Its status is ${info.status}. Run svc login again if you need to.`,
    };
  return { kind: 'request', info, me };
}

function Outcome({ title, text }: { title: string; text: string }) {
  const heading = useRef<HTMLHeadingElement>(null);
  useEffect(() => heading.current?.focus(), [title]);
  return (
    <section aria-labelledby="outcome-title">
      <h2 id="outcome-title" tabIndex={-1} ref={heading}>
        {title}
      </h2>
      <p>{text}</p>
    </section>
  );
}

export default function CliLoginPage() {
  const query = new URLSearchParams(location.search);
  const loginId = query.get('loginId');
  const state = query.get('state');
  const [view, setView] = useState<View>({ kind: 'loading' });
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string>();
  useEffect(() => {
    if (!loginId || !state)
      setView({ kind: 'outcome', title: 'This link is incomplete', text: 'Run svc login again and open the address it prints.' });
    else load(loginId).then(setView, (err: unknown) => status(err) !== 401 && setView({ kind: 'failed', error: describe(err) }));
  }, []);

  const decide = (approve: boolean, me: Me) => async () => {
    setBusy(true);
    try {
      await call(approve ? 'completeCliLogin' : 'denyCliLogin', { body: { loginId: loginId!, state: state! } });
      setView(
        approve
          ? { kind: 'outcome', title: 'CLI login approved', text: `The CLI is now signed in as ${me.user.email}. ${AGAIN}` }
          : { kind: 'outcome', title: 'CLI login denied', text: `The CLI was not signed in. ${AGAIN}` },
      );
    } catch (err) {
      if (status(err) === 409)
        setView({
          kind: 'outcome',
          title: 'This login request is no longer waiting',
          text: 'It expired or was already used. Run svc login again.',
        });
      else setError(describe(err));
    } finally {
      setBusy(false);
    }
  };

  return (
    <>
      <h1>Sign in the command-line client</h1>
      {view.kind === 'loading' && <p aria-busy="true">Loading…</p>}
      {view.kind === 'failed' && <ErrorText error={view.error} />}
      {view.kind === 'outcome' && <Outcome title={view.title} text={view.text} />}
      {view.kind === 'request' && (
        <section aria-labelledby="request-title">
          <h2 id="request-title">Check the code</h2>
          <p>Your terminal shows this code. Approve only if it is the same.</p>
          <p class="code" aria-label="Verification code">
            {view.info.verificationCode}
          </p>
          <dl class="facts">
            <dt>CLI version</dt>
            <dd>{view.info.cliVersion || 'unknown'}</dd>
            <dt>Platform</dt>
            <dd>{view.info.platform || 'unknown'}</dd>
            <dt>Signed in as</dt>
            <dd>{`${view.me.user.email} (${view.me.tenant.name})`}</dd>
            <dt>Expires</dt>
            <dd>{when(view.info.expiresAt)}</dd>
          </dl>
          <p class="actions">
            <button type="button" disabled={busy} onClick={decide(true, view.me)}>
              Approve
            </button>{' '}
            <button type="button" class="secondary" disabled={busy} onClick={decide(false, view.me)}>
              Deny
            </button>
          </p>
          <ErrorText error={error} />
        </section>
      )}
    </>
  );
}
