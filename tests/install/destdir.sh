#!/bin/sh
# SPDX-License-Identifier: MIT
# usage: destdir.sh BUILD-DIR PREFIX: installs into a temporary DESTDIR and checks the tree.
. "$(dirname "$0")/../lib.sh"
set -u
BUILD=$1
PREFIX=$2
scratch fq-install
DESTDIR=$T cmake --install "$BUILD" >"$T/log" 2>&1 || { cat "$T/log" >&2; fail "cmake --install"; }
R=$T$PREFIX
for f in bin/fleetq sbin/agentd bin/fleetq-mkcerts; do
	[ -x "$R/$f" ] || fail "$f is not installed (or not executable)"
done
for f in share/man/man1/fleetq.1 share/man/man8/agentd.8 share/doc/fleetq/certs.md \
	share/fleetq/sql/analysis/stragglers.node.sql share/bash-completion/completions/fleetq \
	share/zsh/site-functions/_fleetq; do
	[ -s "$R/$f" ] || fail "$f is not installed"
done
# the installed mkcerts works on its own
"$R/bin/fleetq-mkcerts" "$T/certs" node1 >"$T/mk.log" 2>&1 || { cat "$T/mk.log" >&2; fail "fleetq-mkcerts"; }
[ -s "$T/certs/node1.crt" ] && [ -s "$T/certs/client.key" ] || fail "fleetq-mkcerts made no certificates"
# the man pages render
if command -v man >/dev/null 2>&1; then
	for m in man1/fleetq.1 man8/agentd.8; do
		MANWIDTH=80 man -l "$R/share/man/$m" 2>"$T/man.err" | grep -q . || fail "man $m"
		! grep -q . "$T/man.err" || { cat "$T/man.err" >&2; fail "man $m warns"; }
	done
fi
echo ok
