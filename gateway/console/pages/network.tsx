// /settings/security/network: the IP allowlist for API keys (one address or CIDR range per line).
import { useState } from 'preact/hooks';
import { call } from '../sdk';
import { ErrorText, Form, useLoad } from '../ui';

export default function NetworkPage() {
  const settings = useLoad(() => call('getNetworkSettings', {}), []);
  const [list, setList] = useState<string>();
  const [status, setStatus] = useState('');
  const value = list ?? settings.data?.ipAllowlist.join('\n') ?? '';
  return (
    <>
      <h1>Network allowlist</h1>
      <p>When the list is not empty, API keys work only from these addresses. Signed-in sessions are not limited.</p>
      <ErrorText error={settings.error} />
      <Form
        submit="Save"
        onSubmit={async (f) => {
          const ipAllowlist = String(f.get('allowlist'))
            .split(/[\s,]+/)
            .map((s) => s.trim())
            .filter(Boolean);
          const saved = await call('putNetworkSettings', { body: { ipAllowlist } });
          setList(saved.ipAllowlist.join('\n'));
          setStatus(
            saved.ipAllowlist.length
              ? `Saved: API keys now work only from ${saved.ipAllowlist.length} address(es).`
              : 'Saved: API keys work from any address.',
          );
        }}
      >
        <p class="field">
          <label for="allowlist">Allowed addresses (one IP address or CIDR range per line, IPv4 or IPv6)</label>
          <textarea
            id="allowlist"
            name="allowlist"
            rows={8}
            spellcheck={false}
            value={value}
            onInput={(e) => setList((e.currentTarget as HTMLTextAreaElement).value)}
          />
        </p>
      </Form>
      <p role="status">{status}</p>
    </>
  );
}
