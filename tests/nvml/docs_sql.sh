#!/bin/sh
# SPDX-License-Identifier: MIT
# The GPU join example of docs/schema.md is the SQL of examples/gpu/ (which
# agentd_gpu_live runs), comments and layout aside.
set -u
TOP=$1
python3 - "$TOP" <<'PY'
import re, sys
top = sys.argv[1]
norm = lambda s: " ".join(re.sub(r"--[^\n]*", "", s).split())
doc = open(top + "/docs/schema.md").read()
sec = doc[doc.index("### Joining collectives to GPU samples"):]
sec = sec[:sec.index("\n## ")]
blocks = [norm(b) for b in re.findall(r"```sql\n(.*?)```", sec, re.S)]
for name in ("node", "merge"):
    f = norm(open(f"{top}/examples/gpu/gpu-vs-peers.{name}.sql").read())
    if f not in blocks:
        sys.exit(f"FAIL: docs/schema.md lacks examples/gpu/gpu-vs-peers.{name}.sql as it is")
print("ok")
PY
