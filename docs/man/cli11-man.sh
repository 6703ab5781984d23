#!/usr/bin/env bash
# cli11-man.sh PROGRAM TEMPLATE VERSION > page
#
# A man page for a CLI11 program: TEMPLATE holds the hand-written sections (NAME,
# DESCRIPTION, FILES ...) and the placeholders @OPTIONS@ and @COMMANDS@, which are filled
# from the program's own --help and each subcommand's --help, so the page lists exactly the
# options and commands of the binary it ships with.
set -euo pipefail
program=$1 template=$2 version=$3

# troff-safe text: backslashes and dashes escaped, no line starting with a dot or quote.
esc() { sed -e 's/\\/\\e/g' -e 's/-/\\-/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"; }

# section NAME < help: the lines of one section of CLI11 help ("Options:", "Subcommands:").
section() {
  awk -v want="$1" '
    tolower($0) ~ "^" want ":" { on = 1; next }
    /^[^ ]/ { on = 0 }
    on && /^  / { print }'
}

# options < help: each "  -j,--json TYPE   description" as a tagged paragraph (a long
# option spec puts its description on the next, deeper indented line).
options() {
  section options | awk '
    function flush() { if (spec != "") printf ".TP\n.B %s\n%s\n", spec, desc; spec = "" }
    /^  [^ ]/ {
      flush()
      line = substr($0, 3)
      n = match(line, /  +/)
      if (n) { spec = substr(line, 1, n - 1); desc = substr(line, n + RLENGTH) }
      else { spec = line; desc = "" }
      gsub(/,/, ", ", spec)
      next
    }
    /^   / { sub(/^ +/, ""); desc = (desc == "" ? $0 : desc " " $0) }
    END { flush() }' | esc_lines
}

# esc_lines: esc, except the .TP/.B requests the awk above wrote.
esc_lines() {
  while IFS= read -r l; do
    case "$l" in
      .TP) echo "$l" ;;
      ".B "*) printf '.B %s\n' "$(esc <<<"${l#.B }")" ;;
      *) esc <<<"$l" ;;
    esac
  done
}

# commands PREFIX...: every subcommand, recursively, with its description and options.
commands() {
  local help name
  help=$("$@" --help)
  section subcommands <<<"$help" | sed -E 's/^  ([^ ]+).*/\1/' | while read -r name; do
    local sub
    sub=$("$@" "$name" --help)
    printf '.SS "%s"\n' "$(printf '%s ' "${@:2}" "$name" | sed 's/ $//' | esc)"
    head -1 <<<"$sub" | esc
    printf '.PP\n.nf\n%s\n.fi\n' "$(grep -m1 '^Usage:' <<<"$sub" | sed "s|$1|$(basename "$1")|" | esc)"
    if [ -n "$(options <<<"$sub" | grep -v -e '-help$' -e '^\.TP$' -e '^$' | grep -v 'Print this help')" ]; then
      options <<<"$sub" | awk 'BEGIN{RS=".TP\n"; ORS=""} !/help/ && NF {print ".TP\n" $0}'
    fi
    commands "$@" "$name"
  done
}

top=$("$program" --help)
opts=$(options <<<"$top")
cmds=$(commands "$program")
while IFS= read -r line; do
  case "$line" in
    @OPTIONS@) printf '%s\n' "$opts" ;;
    @COMMANDS@) printf '%s\n' "$cmds" ;;
    *) printf '%s\n' "${line//@VERSION@/$version}" ;;
  esac
done <"$template"
