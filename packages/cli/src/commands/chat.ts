/** Chat: send a message and stream the reply (`svc chat ...` is `svc chat send ...`), and the sessions and their messages. */
import type { Command } from 'commander';
import { apiPath } from '../api';
import { UsageError } from '../context';
import { addDelete, addGet, addList, type Ctx } from '../resource';
import type { CommandModule } from '.';

function sendCommand(chat: Command, ctx: Ctx): void {
  chat
    .command('send <message...>', { isDefault: true })
    .description('Send a message and stream the reply as it comes (a new session unless --session)')
    .option('-s, --session <id>', 'continue this chat session')
    .action(async (words: string[], o: { session?: string }) => {
      const c = ctx();
      const api = c.api();
      const content = words.join(' ');
      const sessionId =
        o.session ?? (await api.call<{ id: string }>('POST', '/chat/sessions', { body: { title: content.slice(0, 80) } })).id;
      await api.call('POST', apiPath`/chat/sessions/${sessionId}/messages`, { body: { content } });
      let text = '';
      for await (const e of api.chatReply(sessionId)) {
        if (e.type === 'delta') {
          text += e.delta;
          if (c.json) c.out(JSON.stringify({ event: 'delta', delta: e.delta }));
          else process.stdout.write(e.delta);
        } else if (e.type === 'completed') {
          if (c.json) c.out(JSON.stringify({ event: 'completed', sessionId, message: e.message }));
          else process.stdout.write(text.endsWith('\n') ? '' : '\n');
        } else {
          if (!c.json) process.stdout.write('\n');
          throw new UsageError(`The reply failed: ${e.message} [${e.code}]`);
        }
      }
      if (!c.json && !o.session) process.stderr.write(`(session ${sessionId}: continue with --session ${sessionId})\n`);
    });
}

export const chatCommands: CommandModule = (program, ctx) => {
  const chat = program.command('chat').description('Chat: send a message (streams the reply), sessions and their messages');
  sendCommand(chat, ctx);
  const sessions = chat.command('sessions').description('Chat sessions: list, show, delete');
  addList(sessions, ctx, {
    description: 'List chat sessions',
    path: () => '/chat/sessions',
    columns: [
      ['ID', 'id'],
      ['TITLE', 'title'],
      ['MODEL', 'model'],
      ['CREATED', 'createdAt'],
    ],
  });
  addGet(sessions, ctx, { description: 'Show a chat session', path: ([id]) => apiPath`/chat/sessions/${id}` });
  addDelete(sessions, ctx, { description: 'Delete a chat session', noun: 'chat session', path: ([id]) => apiPath`/chat/sessions/${id}` });
  addList(chat, ctx, {
    name: 'messages <sessionId>',
    isDefault: false,
    description: "List a session's messages",
    path: ([id]) => apiPath`/chat/sessions/${id}/messages`,
    columns: [
      ['ID', 'id'],
      ['ROLE', 'role'],
      ['STATUS', 'status'],
      [
        'CONTENT',
        (m) =>
          String(m.content ?? '')
            .replace(/\s+/g, ' ')
            .slice(0, 80),
      ],
    ],
  });
};
