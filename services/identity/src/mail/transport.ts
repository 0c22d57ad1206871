/**
 * Where emails go: an SMTP server (SMTP_URL, through nodemailer), or, without one, the log and a file
 * `DATA_DIR/outbox/<id>.eml` a person on one machine can open to click the link. Both write the same message,
 * composed by nodemailer with the email's own Message-ID.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type * as Nodemailer from 'nodemailer';
import type { Logger } from '@svc/kit';
import type { EmailDoc } from './outbox';

export type SendEmail = (email: EmailDoc) => Promise<void>;

/**
 * nodemailer's transport, made (and nodemailer loaded: ~30 ms of a services process's start) by the first email, not
 * at start: most processes send none.
 */
function onFirstEmail(options: Parameters<typeof Nodemailer.createTransport>[0]) {
  let transport: ReturnType<typeof Nodemailer.createTransport> | undefined;
  return {
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- deliberate lazy load
    get: () => (transport ??= (require('nodemailer') as typeof Nodemailer).createTransport(options)),
    close: () => transport?.close(),
  };
}

const message = (from: string, e: EmailDoc) => ({ from, to: e.to, subject: e.subject, text: e.text, messageId: e.messageId });

export function smtpTransport(url: string, from: string, timeoutMs: number): { send: SendEmail; close: () => void } {
  const transport = onFirstEmail({ url, connectionTimeout: timeoutMs, greetingTimeout: timeoutMs, socketTimeout: timeoutMs });
  return {
    send: async (e) => {
      await transport.get().sendMail(message(from, e));
    },
    close: transport.close,
  };
}

export function fileTransport(dir: string, from: string, logger: Logger): { send: SendEmail; close: () => void } {
  const compose = onFirstEmail({ streamTransport: true, buffer: true, newline: 'unix' });
  return {
    send: async (e) => {
      const info = await compose.get().sendMail(message(from, e));
      await mkdir(dir, { recursive: true });
      const path = join(dir, `${e.id}.eml`);
      await writeFile(path, info.message as Buffer);
      logger.info({ to: e.to, subject: e.subject, messageId: e.messageId, path, text: e.text }, 'email written (SMTP_URL is not set)');
    },
    close: compose.close,
  };
}
