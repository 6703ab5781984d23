# bash completion for vecflowctl. Installed as /usr/share/bash-completion/completions/vecflowctl.
# Subcommands and options are listed here; `vecflowctl call` completes the command names the
# running vecflowd serves (`vecflowctl --json commands`).

_vecflowctl() {
  local cur prev words cword
  _init_completion || return

  local globals="-s --socket -j --json -w --watch -a --all --timeout -h --help"
  local commands="status lcores accounting errors commands metrics config ports steering sched
                  pipeline routes acl neighbours flows reload confirm rollback capture hooks call"

  # The subcommand: the first word that is not an option or an option's value.
  local i cmd="" sub=""
  for ((i = 1; i < cword; i++)); do
    case "${words[i]}" in
      -s | --socket | -w | --watch | --timeout) ((i++)) ;;
      -*) ;;
      *)
        if [[ -z $cmd ]]; then
          cmd=${words[i]}
        elif [[ -z $sub ]]; then
          sub=${words[i]}
        fi
        ;;
    esac
  done

  case "$prev" in
    -s | --socket)
      _filedir
      return
      ;;
    -w | --watch | --timeout | --confirm-within | -c | --count | -d | --duration | --snaplen | -n | --top)
      return
      ;;
    --by)
      COMPREPLY=($(compgen -W "packets bytes" -- "$cur"))
      return
      ;;
    --direction)
      COMPREPLY=($(compgen -W "rx tx both" -- "$cur"))
      return
      ;;
  esac

  case "$cmd" in
    "")
      COMPREPLY=($(compgen -W "$commands $globals" -- "$cur"))
      ;;
    reload)
      if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "--confirm-within $globals" -- "$cur"))
      else
        _filedir 'y?(a)ml'
      fi
      ;;
    config)
      COMPREPLY=($(compgen -W "appliance cpu dpdk logging ports steering scheduler pipeline control" -- "$cur"))
      ;;
    metrics)
      COMPREPLY=($(compgen -W "--family $globals" -- "$cur"))
      ;;
    flows)
      COMPREPLY=($(compgen -W "--top --by $globals" -- "$cur"))
      ;;
    capture)
      if [[ -z $sub ]]; then
        COMPREPLY=($(compgen -W "start stop list" -- "$cur"))
      elif [[ $sub == start ]]; then
        COMPREPLY=($(compgen -W "--direction --count --duration --filter --snaplen --file" -- "$cur"))
      fi
      ;;
    hooks)
      [[ -z $sub ]] && COMPREPLY=($(compgen -W "list add remove" -- "$cur"))
      ;;
    call)
      if [[ -z $sub ]]; then
        local served
        served=$(vecflowctl --json commands 2>/dev/null | sed -n 's/.*"name": "\([a-z_]*\)".*/\1/p')
        COMPREPLY=($(compgen -W "$served" -- "$cur"))
      fi
      ;;
    *)
      COMPREPLY=($(compgen -W "$globals" -- "$cur"))
      ;;
  esac
}

complete -F _vecflowctl vecflowctl
