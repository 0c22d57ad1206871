/**
 * How a receiver verifies a delivery with the `standardwebhooks` package: one text for /docs and for the webhook
 * operations of the OpenAPI document, so the two cannot drift.
 */
export const VERIFY_WEBHOOK_TS = `// npm install standardwebhooks
import { createServer } from 'node:http';
import { Webhook } from 'standardwebhooks';

// The secret POST /webhooks (or rotate-secret) returned: whsec_...
const wh = new Webhook(process.env.WEBHOOK_SECRET!);

createServer((req, res) => {
  let body = '';
  req.setEncoding('utf8');
  req.on('data', (chunk: string) => (body += chunk));
  req.on('end', () => {
    try {
      // Checks webhook-signature over the raw body, and that webhook-timestamp is within 5 minutes.
      const event = wh.verify(body, req.headers as Record<string, string>) as { id: string; type: string };
      // event.id (the webhook-id header) is the same on every retry: handle each id once.
      console.log(event.type, event.id);
      res.writeHead(204).end();
    } catch {
      res.writeHead(400).end();
    }
  });
}).listen(3000);`;

/** The rules around the example, in the words of the contract (CONTRACT.md 5, 14). */
export const VERIFY_WEBHOOK_NOTES = [
  'Each delivery carries `webhook-id`, `webhook-timestamp` and `webhook-signature` (Standard Webhooks).',
  'A `whsec_<base64>` secret keys the HMAC with its decoded bytes, so `new Webhook(secret)` verifies with no options.',
  'Any other secret (one chosen before `whsec_` secrets) keys it with its UTF-8 bytes: ' +
    "`new Webhook(new TextEncoder().encode(secret), { format: 'raw' })`.",
  'During a rotation\u2019s grace period `webhook-signature` holds one signature per secret (`v1,<new> v1,<old>`), ' +
    'so a receiver with either secret verifies.',
];

/** The same as CommonMark, for an operation's `description`. */
export const VERIFY_WEBHOOK_MARKDOWN = `${VERIFY_WEBHOOK_NOTES.map((n) => `- ${n}`).join('\n')}

Verifying a delivery in TypeScript with the \`standardwebhooks\` package:

\`\`\`ts
${VERIFY_WEBHOOK_TS}
\`\`\``;
