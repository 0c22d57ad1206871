// /chat and /chat/:sessionId: a playground. Choose the model (a catalogue name, or an agent), a system prompt and a
// temperature; the first message opens a session and puts it in the address, so a reload shows the history; the reply
// streams in (a reply still streaming after a reload is followed again: the stream replays what was said, then goes
// on). The session's tokens and credits are summed under the conversation; past sessions are listed under the form.
//
// The chat API takes a system prompt and a temperature from the session's agent: a playground setting of either
// is kept on a `Playground` agent (manual: it answers, no tools) that the session is opened with (decision NN).
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { call, describe, listAll, streamChatReply, type Item } from '../sdk';
import { ErrorText, Form, integer, modelNames, useLoad } from '../ui';
import type { Agent } from './agents';
import { ChatSessions } from './chat-sessions';
import type { Project } from './projects';

type Message = Item<'listChatMessages'>;
type Model = Item<'listModels'>;

const PLAYGROUND_AGENT = 'Playground';
const sessionInPath = () => decodeURIComponent(location.pathname.split('/')[2] ?? '') || null;

/** A reply's credits at its model's price (CONTRACT 12: rounded up per call); null when the price is unknown. */
function creditsOf(m: Message, models: Model[]): number | null {
  if (!m.usage) return 0;
  const entry = models.find((e) => e.name === m.model || e.upstreamModel === m.model);
  if (!entry) return null;
  return Math.ceil((m.usage.inputTokens * entry.price.input + m.usage.outputTokens * entry.price.output) / 1_000_000);
}

/** The session's agent for a system prompt or a temperature: the tenant's Playground agent, made or updated. */
async function playgroundAgent(agents: Agent[], systemPrompt: string, temperature: number | null): Promise<string> {
  const config = { autonomyLevel: 'manual', temperature } as any;
  const found = agents.find((a) => a.name === PLAYGROUND_AGENT);
  if (found) {
    await call('updateAgent', { params: { id: found.id }, body: { systemPrompt, config } as any });
    return found.id;
  }
  return ((await call('createAgent', { body: { name: PLAYGROUND_AGENT, systemPrompt, config } as any })) as unknown as Agent).id;
}

export default function ChatPage() {
  const choices = useLoad(async () => {
    const [projects, models, agents] = await Promise.all([
      listAll('listProjects', {}) as Promise<Project[]>,
      listAll('listModels', {}),
      listAll('listAgents', {}) as unknown as Promise<Agent[]>,
    ]);
    return { projects, models, agents };
  }, []);
  const [sessionId, setSessionId] = useState<string | null>(sessionInPath());
  const [messages, setMessages] = useState<Message[]>([]);
  const [error, setError] = useState<string>();
  const stream = useRef<AbortController | null>(null);
  const names = useMemo(() => modelNames(choices.data?.models ?? []), [choices.data]);

  /** Follows the reply to the latest message: deltas append, `completed` or `error` ends it. */
  const follow = async (sid: string, replyId: string) => {
    stream.current?.abort();
    const ctl = new AbortController();
    stream.current = ctl;
    let text = '';
    const update = (patch: Partial<Message>) => setMessages((ms) => ms.map((m) => (m.id === replyId ? { ...m, ...patch } : m)));
    try {
      for await (const e of streamChatReply(sid, ctl.signal)) {
        if (e.type === 'delta') {
          text += e.delta;
          update({ content: text, status: 'streaming' });
        } else if (e.type === 'completed') update(e.message as Partial<Message>);
        else update({ status: 'failed', error: { code: e.code, message: e.message } });
      }
    } catch (err) {
      if (!ctl.signal.aborted) setError(describe(err));
    }
  };

  useEffect(() => {
    if (!sessionId) return;
    let stopped = false;
    listAll('listChatMessages', { params: { id: sessionId } })
      .then((list) => {
        if (stopped) return;
        const ordered = [...list].sort((a, b) => a.createdAt.localeCompare(b.createdAt) || (a.role === 'user' ? -1 : 1));
        setMessages(ordered);
        const last = ordered.at(-1);
        if (last?.role === 'assistant' && (last.status === 'pending' || last.status === 'streaming')) void follow(sessionId, last.id);
      })
      .catch((err) => setError(describe(err)));
    return () => {
      stopped = true;
    };
    // Loaded once per session: later changes come from this page.
  }, []);
  useEffect(() => () => stream.current?.abort(), []);

  const replies = messages.filter((m) => m.role === 'assistant' && m.usage);
  const tokens = replies.reduce((n, m) => n + m.usage!.inputTokens + m.usage!.outputTokens, 0);
  const costs = replies.map((m) => creditsOf(m, choices.data?.models ?? []));
  const credits = costs.reduce<number>((n, c) => n + (c ?? 0), 0);

  return (
    <>
      <h1>Chat</h1>
      <ErrorText error={error ?? choices.error} />
      <ol class="messages" aria-label="Conversation" aria-live="polite">
        {messages.map((m) => (
          <li key={m.id} class={`message ${m.role}`}>
            <strong>{m.role === 'user' ? 'You' : 'Assistant'}:</strong> <span class="content">{m.content}</span>
            {m.status === 'failed' && <span class="error"> ({m.error?.message ?? 'failed'})</span>}
          </li>
        ))}
      </ol>
      <dl class="facts" aria-label="This session">
        <dt>Tokens</dt>
        <dd id="session-tokens">{integer(tokens)}</dd>
        <dt>Credits</dt>
        <dd id="session-credits">{`${integer(credits)}${costs.includes(null) ? ' (some at an unknown price)' : ''}`}</dd>
      </dl>
      <Form
        submit="Send"
        onSubmit={async (f) => {
          const form = document.getElementById('chat-message') as HTMLTextAreaElement;
          const projectId = (f.get('projectId') as string) || undefined;
          const choice = f.get('model') as string;
          const agentChoice = choice.startsWith('agent:') ? choice.slice('agent:'.length) : null;
          const model = agentChoice || !choice ? undefined : choice;
          let sid = sessionId;
          if (!sid) {
            const systemPrompt = ((f.get('systemPrompt') as string) ?? '').trim();
            const temperature = f.get('temperature') === '' || f.get('temperature') === null ? null : Number(f.get('temperature'));
            const agentId =
              agentChoice ??
              (systemPrompt || temperature !== null
                ? await playgroundAgent(choices.data?.agents ?? [], systemPrompt, temperature)
                : undefined);
            sid = (await call('createChatSession', { body: { projectId, agentId, model } })).id;
            setSessionId(sid);
            history.replaceState(null, '', `/chat/${encodeURIComponent(sid)}`);
          }
          const posted = await call('sendChatMessage', {
            params: { id: sid },
            body: { content: f.get('content') as string, projectId, model },
          });
          form.value = '';
          const user = posted.message as unknown as Message;
          const reply: Message = {
            ...user,
            id: posted.responseMessageId,
            role: 'assistant',
            content: '',
            status: 'pending',
            error: null,
            usage: null,
          };
          setMessages((ms) => [...ms, user, reply]);
          void follow(sid, posted.responseMessageId);
        }}
      >
        <p class="field">
          <label for="chat-model">Model</label>
          <select id="chat-model" name="model">
            <option value="">Default model</option>
            <optgroup label="Models">
              {names.map((n) => (
                <option value={n}>{n}</option>
              ))}
            </optgroup>
            <optgroup label="Agents">
              {choices.data?.agents.map((a) => (
                <option value={`agent:${a.id}`}>{`Agent: ${a.name}`}</option>
              ))}
            </optgroup>
          </select>
        </p>
        <p class="field">
          <label for="chat-project">Project</label>
          <select id="chat-project" name="projectId">
            <option value="">No project</option>
            {choices.data?.projects.map((p) => (
              <option value={p.id}>{p.name}</option>
            ))}
          </select>
        </p>
        {!sessionId && (
          <>
            <p class="field">
              <label for="chat-system">System prompt</label>
              <textarea id="chat-system" name="systemPrompt" rows={2} maxLength={20_000} />
            </p>
            <p class="field">
              <label for="chat-temperature">Temperature</label>
              <input id="chat-temperature" name="temperature" type="number" min={0} max={2} step={0.1} />
            </p>
          </>
        )}
        <p class="field">
          <label for="chat-message">Message</label>
          <textarea id="chat-message" name="content" rows={3} required maxLength={32_000} />
        </p>
      </Form>
      <ChatSessions current={sessionId} />
    </>
  );
}
