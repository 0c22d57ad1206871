// /chat and /chat/:sessionId: a playground. The first message opens a session (in the chosen project) and puts it in
// the address, so a reload shows the history; a reply still streaming after a reload is followed again (the stream
// replays what was already said, then goes on).
import { useEffect, useRef, useState } from 'preact/hooks';
import { api, describe, listAll } from '../api';
import { ErrorText, Form, useLoad } from '../ui';
import type { Project } from './projects';

interface Message {
  id: string;
  role: 'user' | 'assistant';
  content: string;
  projectId: string | null;
  status: 'pending' | 'streaming' | 'completed' | 'failed';
  error: { code: string; message: string } | null;
  createdAt: string;
}

const sessionInPath = () => decodeURIComponent(location.pathname.split('/')[2] ?? '') || null;

export default function ChatPage() {
  const projects = useLoad(() => listAll<Project>('/projects'), []);
  const [sessionId, setSessionId] = useState<string | null>(sessionInPath());
  const [messages, setMessages] = useState<Message[]>([]);
  const [error, setError] = useState<string>();
  const source = useRef<EventSource | null>(null);

  /** Follows the reply to the latest message: deltas append, `message.completed` or `error` ends it. */
  const follow = (sid: string, replyId: string) => {
    source.current?.close();
    const es = new EventSource(`/api/v1/chat/sessions/${encodeURIComponent(sid)}/stream`);
    source.current = es;
    let text = '';
    const update = (patch: Partial<Message>) => setMessages((ms) => ms.map((m) => (m.id === replyId ? { ...m, ...patch } : m)));
    es.addEventListener('message.delta', (e) => {
      text += JSON.parse((e as MessageEvent).data).delta;
      update({ content: text, status: 'streaming' });
    });
    es.addEventListener('message.completed', (e) => {
      es.close();
      update(JSON.parse((e as MessageEvent).data).message);
    });
    es.addEventListener('error', (e) => {
      const data = (e as MessageEvent).data;
      if (!data) return; // a dropped connection: EventSource reconnects with Last-Event-ID
      es.close();
      const err = JSON.parse(data);
      update({ status: 'failed', error: err });
    });
  };

  useEffect(() => {
    if (!sessionId) return;
    let stopped = false;
    listAll<Message>(`/chat/sessions/${encodeURIComponent(sessionId)}/messages`)
      .then((list) => {
        if (stopped) return;
        const ordered = [...list].sort((a, b) => a.createdAt.localeCompare(b.createdAt) || (a.role === 'user' ? -1 : 1));
        setMessages(ordered);
        const last = ordered.at(-1);
        if (last?.role === 'assistant' && (last.status === 'pending' || last.status === 'streaming')) follow(sessionId, last.id);
      })
      .catch((err) => setError(describe(err)));
    return () => {
      stopped = true;
    };
    // Loaded once per session: later changes come from this page.
  }, []);
  useEffect(() => () => source.current?.close(), []);

  return (
    <>
      <h1>Chat</h1>
      <ErrorText error={error ?? projects.error} />
      <ol class="messages" aria-label="Conversation" aria-live="polite">
        {messages.map((m) => (
          <li key={m.id} class={`message ${m.role}`}>
            <strong>{m.role === 'user' ? 'You' : 'Assistant'}:</strong> <span class="content">{m.content}</span>
            {m.status === 'failed' && <span class="error"> ({m.error?.message ?? 'failed'})</span>}
          </li>
        ))}
      </ol>
      <Form
        submit="Send"
        reset
        onSubmit={async (f) => {
          const projectId = (f.get('projectId') as string) || undefined;
          let sid = sessionId;
          if (!sid) {
            sid = (await api<{ id: string }>('POST', '/chat/sessions', { projectId })).id;
            setSessionId(sid);
            history.replaceState(null, '', `/chat/${encodeURIComponent(sid)}`);
          }
          const posted = await api<{ message: Message; responseMessageId: string }>(
            'POST',
            `/chat/sessions/${encodeURIComponent(sid)}/messages`,
            {
              content: f.get('content'),
              projectId,
            },
          );
          const reply: Message = {
            ...posted.message,
            id: posted.responseMessageId,
            role: 'assistant',
            content: '',
            status: 'pending',
            error: null,
          };
          setMessages((ms) => [...ms, posted.message, reply]);
          follow(sid, posted.responseMessageId);
        }}
      >
        <p class="field">
          <label for="chat-project">Project</label>
          <select id="chat-project" name="projectId">
            <option value="">No project</option>
            {projects.data?.map((p) => (
              <option value={p.id}>{p.name}</option>
            ))}
          </select>
        </p>
        <p class="field">
          <label for="chat-message">Message</label>
          <textarea id="chat-message" name="content" rows={3} required maxLength={32_000} />
        </p>
      </Form>
    </>
  );
}
