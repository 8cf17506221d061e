#!/bin/bash
# SPDX-License-Identifier: MIT
# The bash and zsh completion files offer every long option fleetq --help lists (and no
# other), and bash's completes what it should: options, --format values, subcommands,
# ^FILE after -w, nothing once the SQL is there.
# usage: completion.sh FLEETQ SOURCE-DIR
set -u
FLEETQ=$1
SRC=$2
fails=0
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
help=$("$FLEETQ" --help | grep -o -- '--[a-z][a-z-]*' | sort -u)
bash_opts=$(grep -o -- '--[a-z][a-z-]*' <(sed -n "/^_fleetq_opts=/,/'$/p" "$SRC/fanout/fleetq.bash-completion") |
	sort -u)
zsh_opts=$(grep -oE -- "'\*?(\([^)]*\))?(\{[^}]*\})?--[a-z][a-z-]*|,--[a-z][a-z-]*\}" "$SRC/fanout/_fleetq" |
	grep -o -- '--[a-z][a-z-]*' | sort -u)
[ "$help" = "$bash_opts" ] || bad "bash completion options differ from --help: $(diff <(echo "$help") <(echo "$bash_opts") | grep '^[<>]' | tr '\n' ' ')"
[ "$help" = "$zsh_opts" ] || bad "zsh completion options differ from --help: $(diff <(echo "$help") <(echo "$zsh_opts") | grep '^[<>]' | tr '\n' ' ')"

# comp WORDS...: COMPREPLY for the last word, space-joined and sorted
comp() {
	COMP_WORDS=("$@")
	COMP_CWORD=$(($# - 1))
	_fleetq
	[ ${#COMPREPLY[@]} = 0 ] || printf '%s\n' "${COMPREPLY[@]}" | sort | tr '\n' ' '
}
# shellcheck source=/dev/null
. "$SRC/fanout/fleetq.bash-completion"
complete -p fleetq >/dev/null || bad "bash: no completion registered for fleetq"
[ "$(comp fleetq --form)" = "--format " ] || bad "bash: --form -> '$(comp fleetq --form)'"
[ "$(comp fleetq --format j)" = "json junit " ] || bad "bash: --format j"
[ "$(comp fleetq -w "'gpu[01-04]'" str)" = "stragglers " ] || bad "bash: subcommand after -w"
[ "$(comp fleetq --hosts h.txt --since 5m g)" = "gate " ] || bad "bash: subcommand after options"
[ "$(comp fleetq "SELECT 1" s)" = "" ] || bad "bash: a subcommand after the SQL"
[ "$(comp fleetq gate --builtin busy_)" = "busy_gap_us busy_skew " ] || bad "bash: --builtin"
T=$(mktemp -d "${TMPDIR:-/tmp}/fq-comp.XXXXXX")
trap 'rm -rf "$T"' EXIT
: >"$T/nodes.txt"
(cd "$T" && [ "$(comp fleetq -w ^nod)" = "^nodes.txt " ]) || bad "bash: -w ^FILE"
(cd "$T" && [ "$(comp fleetq --hosts nod)" = "nodes.txt " ]) || bad "bash: --hosts FILE"
if command -v zsh >/dev/null 2>&1; then
	zsh -n "$SRC/fanout/_fleetq" || bad "zsh: syntax"
fi
[ $fails = 0 ] || exit 1
echo ok
