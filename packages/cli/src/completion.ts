/**
 * Shell completion scripts made from the program itself: the generator walks commander's tree (commander has none
 * of its own), so a command added anywhere completes with no list to keep. Each script finds the command path typed
 * so far (skipping options and their values) and offers that command's subcommands, or its options after a `-`.
 * bash: a `complete -F` function; zsh: the same through bashcompinit; fish: one function answering with descriptions.
 */
import type { Command, Option } from 'commander';

interface Node {
  /** Space-separated command path below the program: '' for `svc` itself, 'projects list', ... */
  path: string;
  subcommands: Array<[name: string, description: string]>;
  options: Array<[flag: string, description: string]>;
}

export const SHELLS = ['bash', 'zsh', 'fish'] as const;
export type Shell = (typeof SHELLS)[number];

const visible = (options: readonly Option[]) => options.filter((o) => !o.hidden);
const flagsOf = (options: readonly Option[]) => visible(options).flatMap((o) => [o.long, o.short].filter((f): f is string => !!f));

function walk(program: Command): { nodes: Node[]; valueFlags: string[] } {
  // The program's options work after any command too (all but --version).
  const globals = visible(program.options).filter((o) => o.long !== '--version');
  const nodes: Node[] = [];
  const valueFlags = new Set<string>();
  const visit = (command: Command, path: string[]) => {
    const own = visible(command.options);
    for (const o of own) if (o.required || o.optional) flagsOf([o]).forEach((f) => valueFlags.add(f));
    const all = command === program ? own : [...own, ...globals];
    nodes.push({
      path: path.join(' '),
      subcommands: command.commands.map((c) => [c.name(), c.description()]),
      options: [...all.flatMap((o) => (o.long ? [[o.long, o.description] as [string, string]] : [])), ['--help', 'show help']],
    });
    for (const c of command.commands) visit(c, [...path, c.name()]);
  };
  visit(program, []);
  return { nodes, valueFlags: [...valueFlags].sort() };
}

const quote = (s: string) => `'${s.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
/** bash and zsh: a `case` arm per command path (command names and flags are plain words). */
const cases = (nodes: Node[], words: (n: Node) => string[]) =>
  nodes.map((n) => `    "${n.path}") echo "${words(n).join(' ')}" ;;`).join('\n');

function bash(name: string, nodes: Node[], valueFlags: string[]): string {
  return `# ${name} completion for bash. Load it with: source <(${name} completion bash)
_${name}_subcommands() {
  case "$1" in
${cases(nodes, (n) => n.subcommands.map(([s]) => s))}
  esac
}
_${name}_options() {
  case "$1" in
${cases(nodes, (n) => n.options.map(([f]) => f))}
  esac
}
_${name}() {
  local cur="\${COMP_WORDS[COMP_CWORD]}" path="" word i skip=0
  for ((i = 1; i < COMP_CWORD; i++)); do
    word="\${COMP_WORDS[i]}"
    if ((skip)); then skip=0; continue; fi
    case " ${valueFlags.join(' ')} " in *" $word "*) skip=1; continue ;; esac
    [[ "$word" == -* ]] && continue
    case " $(_${name}_subcommands "$path") " in *" $word "*) path="\${path:+$path }$word" ;; esac
  done
  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$(_${name}_options "$path")" -- "$cur"))
  else
    COMPREPLY=($(compgen -W "$(_${name}_subcommands "$path")" -- "$cur"))
  fi
}
complete -F _${name} ${name}
`;
}

function fish(name: string, nodes: Node[], valueFlags: string[]): string {
  const arms = (pick: (n: Node) => Array<[string, string]>) =>
    nodes
      .filter((n) => pick(n).length)
      .map(
        (n) =>
          `    case ${quote(n.path)}\n        printf '%s\\n' ${pick(n)
            .map(([w, d]) => quote(`${w}\t${d}`))
            .join(' ')}`,
      )
      .join('\n');
  return `# ${name} completion for fish. Load it with: ${name} completion fish | source
function __${name}_subcommands
    switch $argv[1]
${arms((n) => n.subcommands)}
    end
end
function __${name}_options
    switch $argv[1]
${arms((n) => n.options)}
    end
end
function __${name}_complete
    set -l path ''
    set -l skip 0
    for word in (commandline -opc)[2..-1]
        if test $skip = 1
            set skip 0
            continue
        end
        if contains -- $word ${valueFlags.join(' ')}
            set skip 1
            continue
        end
        string match -q -- '-*' $word; and continue
        if contains -- $word (__${name}_subcommands "$path" | string replace -r '\\t.*' '')
            set path (string trim -- "$path $word")
        end
    end
    if string match -q -- '-*' (commandline -ct)
        __${name}_options "$path"
    else
        __${name}_subcommands "$path"
    end
end
complete -c ${name} -f -a '(__${name}_complete)'
`;
}

export function completionScript(program: Command, shell: Shell): string {
  const name = program.name();
  const { nodes, valueFlags } = walk(program);
  if (shell === 'fish') return fish(name, nodes, valueFlags);
  const script = bash(name, nodes, valueFlags);
  // zsh runs the bash function through its bash-compatible completion layer.
  return shell === 'zsh'
    ? `#compdef ${name}\n# ${name} completion for zsh. Load it with: source <(${name} completion zsh)\nautoload -U +X bashcompinit && bashcompinit\n${script}`
    : script;
}
