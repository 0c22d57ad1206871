/** A real SMTP server for tests (smtp-server): records each message it accepts, parsed (mailparser). */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
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
  /**
   * Recipients whose first message is read to its end and then never answered: the sender is left waiting in the
   * middle of its send (the message is in `held`, not in `received`), e.g. to be killed there.
   */
  holdOnce: Set<string>;
  /** The messages `holdOnce` kept without an answer. */
  held: ReceivedMail[];
  close(): Promise<void>;
}

export async function startMailServer(): Promise<MailServer> {
  const received: ReceivedMail[] = [];
  const refused: string[] = [];
  const refuseOnce = new Set<string>();
  const holdOnce = new Set<string>();
  const held: ReceivedMail[] = [];
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
          if (holdOnce.delete(to)) return void held.push(m); // no callback: no answer to the final "."
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
    holdOnce,
    held,
    close: () => new Promise<void>((done) => server.close(() => done())),
  };
}

/** The one-time link's token in a message (the last path segment of its link). */
export function linkToken(mail: ReceivedMail, path: string): string {
  const m = new RegExp(`${path}/([0-9A-Za-z]+)`).exec(mail.text);
  if (!m) throw new Error(`no ${path} link in: ${mail.text}`);
  return m[1];
}

/**
 * Without SMTP_URL the system writes each email to DATA_DIR/outbox/<id>.eml: the token of the newest link at `path`
 * in a message to `to`, once one is there.
 */
export async function outboxToken(dataDir: string, to: string, path: string): Promise<string> {
  const dir = join(dataDir, 'outbox');
  const deadline = Date.now() + 10_000;
  for (;;) {
    const names = existsSync(dir) ? readdirSync(dir) : [];
    for (const name of names.sort().reverse()) {
      const parsed = await simpleParser(readFileSync(join(dir, name)));
      const address = (Array.isArray(parsed.to) ? parsed.to[0] : parsed.to)?.value[0]?.address;
      const m = new RegExp(`${path}/([0-9A-Za-z]+)`).exec(parsed.text ?? '');
      if (address === to && m) return m[1];
    }
    if (Date.now() > deadline) throw new Error(`no email to ${to} with a ${path} link in ${dir}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
