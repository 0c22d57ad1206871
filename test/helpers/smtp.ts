/** A real SMTP server for tests (smtp-server): records each message it accepts, parsed (mailparser). */
import type { AddressInfo } from 'node:net';
import { simpleParser } from 'mailparser';
import { SMTPServer } from 'smtp-server';

export interface ReceivedMail {
  to: string;
  subject: string;
  text: string;
  messageId: string;
}

export interface MailServer {
  url: string;
  received: ReceivedMail[];
  /** Message-IDs refused with a temporary failure (451) by `refuseOnce`. */
  refused: string[];
  /** Recipients whose first message is refused with 451 (a retry must follow). */
  refuseOnce: Set<string>;
  close(): Promise<void>;
}

export async function startMailServer(): Promise<MailServer> {
  const received: ReceivedMail[] = [];
  const refused: string[] = [];
  const refuseOnce = new Set<string>();
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS', 'AUTH'],
    logger: false,
    onData(stream, _session, callback) {
      simpleParser(stream).then(
        (mail) => {
          const to = (Array.isArray(mail.to) ? mail.to[0] : mail.to)?.value[0]?.address ?? '';
          const m = { to, subject: mail.subject ?? '', text: mail.text ?? '', messageId: mail.messageId ?? '' };
          if (refuseOnce.delete(to)) {
            refused.push(m.messageId);
            return callback(Object.assign(new Error('try again later'), { responseCode: 451 }));
          }
          received.push(m);
          callback();
        },
        (err: Error) => callback(err),
      );
    },
  });
  await new Promise<void>((ready) => server.listen(0, '127.0.0.1', ready));
  const { port } = server.server.address() as AddressInfo;
  return {
    url: `smtp://127.0.0.1:${port}`,
    received,
    refused,
    refuseOnce,
    close: () => new Promise<void>((done) => server.close(() => done())),
  };
}

/** The one-time link's token in a message (the last path segment of its link). */
export function linkToken(mail: ReceivedMail, path: string): string {
  const m = new RegExp(`${path}/([0-9A-Za-z]+)`).exec(mail.text);
  if (!m) throw new Error(`no ${path} link in: ${mail.text}`);
  return m[1];
}
