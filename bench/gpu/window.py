#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# Cuts a window of trace files (one per node, as bench/gpu/detect.sh brings them back) into
# one case file for tests/analysis/real.py: the collectives and plugin rows of
# [START_NS - 0.5 s, END_NS] (the node SQL reads a little before the window for the step's
# first seq), the GPU-busy slices of the same time where the trace has them, every comms and
# processes row, and meta's host_id.
# usage: window.py OUT.json.gz START_NS END_NS TRACE.db...
#   (detect.sh's phases: a gap of 0.2 s or more in rank 0's collectives ends each one)
import gzip, json, sqlite3, sys


def cut(db, start, end, more=()):
    """The window's rows of one trace (an open connection): {table: {cols, rows}}; more:
    other tables cut by ts_ns as well (left out where an older trace lacks them)."""
    tables = {}
    for t, where in ([("collectives", "ts_ns BETWEEN ? AND ?"),
                      ("nccl_kernels", "ts_ns BETWEEN ? AND ?"),
                      ("comms", None), ("processes", None)]
                     + [(m, "ts_ns BETWEEN ? AND ?") for m in ("gpu_busy",) + tuple(more)]):
        try:
            cur = db.execute("SELECT * FROM %s%s" % (t, " WHERE " + where if where else ""),
                             (start - 500_000_000, end) if where else ())
        except sqlite3.OperationalError:
            if t in more or t == "gpu_busy":
                continue
            raise
        tables[t] = {"cols": [c[0] for c in cur.description], "rows": cur.fetchall()}
    tables["meta"] = {"rows": db.execute(
        "SELECT key, value FROM meta WHERE key = 'host_id'").fetchall()}
    return tables


def write(path, schema, tables):
    """A new trace file at path (schema's tables) holding a cut's rows."""
    db = sqlite3.connect(path)
    db.executescript(schema)
    for t, v in tables.items():
        if t == "meta":
            db.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", v["rows"])
        else:
            db.executemany("INSERT OR IGNORE INTO %s (%s) VALUES (%s)" % (
                t, ",".join(v["cols"]), ",".join("?" * len(v["cols"]))), v["rows"])
    db.commit()
    db.close()


if __name__ == "__main__":
    out, start, end = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    nodes = [{"tables": cut(sqlite3.connect("file:%s?mode=ro" % path, uri=True), start, end)}
             for path in sys.argv[4:]]
    with gzip.open(out, "wt") as f:
        json.dump({"start_ns": start, "end_ns": end, "nodes": nodes}, f,
                  separators=(",", ":"))
