#!/bin/sh
# SPDX-License-Identifier: MIT
# agentd --gpu-interval: a bad value is a usage error (exit 2) with one line naming the flag.
set -u
AGENTD=$1
fails=0
for v in abc -1 0.001 3601 1s ""; do
	want="agentd: --gpu-interval wants seconds from 0.01 to 3600 (0: off), not '$v'"
	out=$("$AGENTD" --listen 127.0.0.1:0 --db /nonexistent/x.db --insecure \
		--gpu-interval "$v" 2>&1)
	rc=$?
	if [ $rc != 2 ] || [ "$out" != "$want" ]; then
		echo "FAIL: --gpu-interval '$v': exit $rc, '$out'" >&2
		fails=$((fails + 1))
	fi
done
[ $fails = 0 ] || exit 1
echo ok
