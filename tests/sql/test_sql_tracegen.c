/* SPDX-License-Identifier: MIT */
/*
 * fq-tracegen writes exactly the rows its arguments ask for, and the planted
 * straggler shows in the direction DESIGN.md section 2 says: the slow rank
 * arrives last, is busiest on-CPU and waits least; a hung rank stops.
 * usage: test_sql_tracegen PATH-TO-fq-tracegen WORKDIR
 */
#include <errno.h>
#include <sys/wait.h>
#include <time.h>

#include "check.h"
#include "fqsql.h"

static const char *gen, *dir;

static int tracegen(const char *out, const char *args)
{
	char cmd[2048];
	int st;

	snprintf(cmd, sizeof(cmd), "'%s' --out '%s/%s' %s >/dev/null", gen, dir, out, args);
	st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static sqlite3 *open_trace(const char *name)
{
	char path[1024], *cause = NULL;
	sqlite3 *db = NULL;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	CHECK_MSG(fqsql_open_readonly(path, NULL, &db, &cause) == 0, "open %s: %s", path, cause);
	free(cause);
	return db;
}

/* One integer from a guarded query; INT64_MIN on failure. */
static int64_t q(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *st = NULL;
	char *cause = NULL;
	int64_t v = INT64_MIN;

	if (!db)
		return v;
	if (fqsql_prepare(db, sql, &st, &cause) == 0 && sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_int64(st, 0);
	CHECK_MSG(v != INT64_MIN, "%s: %s", sql, cause ? cause : sqlite3_errmsg(db));
	sqlite3_finalize(st);
	free(cause);
	return v;
}

static const char *qtext(sqlite3 *db, const char *sql, char *buf, size_t n)
{
	sqlite3_stmt *st = NULL;
	char *cause = NULL;

	buf[0] = 0;
	if (db && fqsql_prepare(db, sql, &st, &cause) == 0 && sqlite3_step(st) == SQLITE_ROW &&
	    sqlite3_column_text(st, 0))
		snprintf(buf, n, "%s", (const char *)sqlite3_column_text(st, 0));
	sqlite3_finalize(st);
	free(cause);
	return buf;
}

#define EQ(db, sql, want)                                                                  \
	do {                                                                               \
		int64_t got_ = q(db, sql);                                                 \
		CHECK_MSG(got_ == (want), "%s: got %lld, want %lld", sql, (long long)got_,     \
		      (long long)(want));                                                  \
	} while (0)

/* per-rank signals, as an analysis would compute them */
#define LATEST_RANK_COUNT                                                                  \
	"SELECT count(*) FROM (SELECT rank, ts_ns, max(ts_ns) OVER (PARTITION BY seq) AS m "   \
	"FROM collectives) WHERE ts_ns = m AND rank = "
#define BUSIEST_RANK                                                                       \
	"SELECT rank FROM collectives GROUP BY rank ORDER BY median(busy_ns) DESC LIMIT 1"
#define LEAST_WAIT_RANK                                                                    \
	"SELECT p.rank FROM cuda_calls c JOIN processes p USING (pid) WHERE c.kind = 'sync' "  \
	"GROUP BY p.rank ORDER BY sum(c.dur_ns) LIMIT 1"

static void test_single_node(void)
{
	char buf[128];
	sqlite3 *db;

	CHECK_MSG(tracegen("one.db", "--node n1 --ranks 4 --steps 200 --slow-rank 2 --slow-pct 20 "
		       "--seed 7 --step-ns 50000000") == 0, "fq-tracegen failed");
	db = open_trace("one.db");
	EQ(db, "SELECT count(*) FROM collectives", 4 * 200);
	EQ(db, "SELECT count(*) FROM cuda_calls", 4 * 200 * 3);
	EQ(db, "SELECT count(*) FROM cuda_calls WHERE kind = 'sync' AND "
	       "api = 'cudaStreamSynchronize'", 4 * 200);
	EQ(db, "SELECT count(*) FROM cuda_calls WHERE kind = 'launch'", 4 * 200 * 2);
	EQ(db, "SELECT count(*) FROM offcpu", 4 * 20);
	EQ(db, "SELECT count(*) FROM processes", 4);
	EQ(db, "SELECT count(*) FROM comms", 4);
	EQ(db, "SELECT count(DISTINCT comm_hash) FROM collectives", 1);
	EQ(db, "SELECT count(*) FROM comms c JOIN collectives USING (comm_hash) WHERE c.rank = 0",
	   800);
	EQ(db, "SELECT min(seq) + max(seq) * 1000 FROM collectives", 199 * 1000);
	EQ(db, "SELECT count(*) FROM (SELECT seq FROM collectives GROUP BY seq "
	       "HAVING count(DISTINCT rank) = 4)", 200);
	EQ(db, "SELECT min(world_size) + max(world_size) FROM processes", 8);
	EQ(db, "SELECT value FROM meta WHERE key = 'schema_version'", FQSQL_SCHEMA_VERSION);
	CHECK_MSG(!strcmp(qtext(db, "SELECT value FROM meta WHERE key = 'node'", buf, sizeof(buf)),
		      "n1"), "meta node '%s'", buf);
	CHECK_MSG(!strcmp(qtext(db, "SELECT value FROM meta WHERE key = 'clock_source'", buf,
			    sizeof(buf)), "generated"), "meta clock_source '%s'", buf);
	/* enqueue only: ~25 us, no signal in the collective's own duration */
	EQ(db, "SELECT count(*) FROM collectives WHERE dur_ns NOT BETWEEN 20000 AND 30000", 0);

	/* the straggler: last to arrive on every step, busiest, shortest sync wait */
	EQ(db, LATEST_RANK_COUNT "2", 200);
	EQ(db, BUSIEST_RANK, 2);
	EQ(db, LEAST_WAIT_RANK, 2);
	/* its peers wait about its extra 20% of a 50 ms step longer */
	EQ(db, "SELECT min(w) - (SELECT median(c.dur_ns) FROM cuda_calls c JOIN processes p "
	       "USING (pid) WHERE c.kind = 'sync' AND p.rank = 2) > 9000000 FROM (SELECT "
	       "median(c.dur_ns) AS w FROM cuda_calls c JOIN processes p USING (pid) WHERE "
	       "c.kind = 'sync' AND p.rank <> 2 GROUP BY p.rank)", 1);
	/* robust z-scores across ranks flag rank 2 alone, on busy and on wait */
	EQ(db, "WITH r AS (SELECT rank, median(busy_ns) AS v FROM collectives GROUP BY rank), "
	       "s AS (SELECT median(v) AS m, mad(v) AS d FROM r) SELECT sum(rank + 1) FROM r, s "
	       "WHERE abs(robust_z(v, m, d)) > 3.5", 3);
	EQ(db, "WITH r AS (SELECT p.rank, sum(c.dur_ns) AS v FROM cuda_calls c JOIN processes p "
	       "USING (pid) WHERE c.kind = 'sync' GROUP BY p.rank), s AS (SELECT median(v) AS m, "
	       "mad(v) AS d FROM r) SELECT sum(rank + 1) FROM r, s WHERE robust_z(v, m, d) < -3.5",
	   3);
	fqsql_close(db);

	/* a clean run has no rank that is always last */
	CHECK_MSG(tracegen("clean.db", "--node n1 --ranks 4 --steps 200 --seed 7") == 0,
	      "fq-tracegen failed");
	db = open_trace("clean.db");
	for (int r = 0; r < 4; r++) {
		char sql[256];

		snprintf(sql, sizeof(sql), LATEST_RANK_COUNT "%d", r);
		CHECK_MSG(q(db, sql) < 120, "clean run: rank %d last on most steps", r);
	}
	fqsql_close(db);
}

/* Two nodes generated apart form the same job as one node generating all ranks. */
static void test_multi_node(void)
{
	const char *job = "--nranks 4 --steps 100 --slow-rank 3 --slow-pct 10 --seed 11 "
			  "--start-ns 1700000000000000000 "
			  "--comm-hash 00112233445566AA";
	char args[512], path[1024], *err = NULL;
	sqlite3 *db;
	int rc;

	snprintf(args, sizeof(args), "--node a --ranks 2 --rank-base 0 %s", job);
	CHECK_MSG(tracegen("node-a.db", args) == 0, "fq-tracegen node a failed");
	snprintf(args, sizeof(args), "--node b --ranks 2 --rank-base 2 %s --wal", job);
	CHECK_MSG(tracegen("node-b.db", args) == 0, "fq-tracegen node b failed");
	snprintf(args, sizeof(args), "--node all --ranks 4 %s", job);
	CHECK_MSG(tracegen("node-all.db", args) == 0, "fq-tracegen all failed");

	/* node b was left in WAL mode: the guard reads it too */
	db = open_trace("node-b.db");
	EQ(db, "SELECT count(*) FROM collectives WHERE rank IN (2, 3)", 200);
	fqsql_close(db);

	/* merge the way the coordinator does: union in one in-memory database */
	sqlite3_open(":memory:", &db);
	fqsql_register(db);
	snprintf(path, sizeof(path), "ATTACH '%s/node-a.db' AS a; ATTACH '%s/node-b.db' AS b; "
		 "ATTACH '%s/node-all.db' AS x; CREATE TABLE c AS SELECT * FROM a.collectives "
		 "UNION ALL SELECT * FROM b.collectives;", dir, dir, dir);
	rc = sqlite3_exec(db, path, NULL, NULL, &err);
	CHECK_MSG(rc == SQLITE_OK, "merge: %s", err);
	sqlite3_free(err);
	sqlite3_close(db);
	if (rc != SQLITE_OK)
		return;
	/* reopen through the guard is not possible for :memory:, so check via a file copy */
	snprintf(path, sizeof(path), "%s/merged.db", dir);
	unlink(path);
	sqlite3_open(path, &db);
	snprintf(args, sizeof(args), "ATTACH '%s/node-a.db' AS a; ATTACH '%s/node-b.db' AS b; "
		 "ATTACH '%s/node-all.db' AS x;", dir, dir, dir);
	sqlite3_exec(db, args, NULL, NULL, NULL);
	sqlite3_exec(db, "CREATE TABLE collectives AS SELECT * FROM a.collectives UNION ALL "
		     "SELECT * FROM b.collectives; CREATE TABLE allranks AS SELECT * FROM "
		     "x.collectives; CREATE TABLE processes AS SELECT * FROM a.processes UNION ALL "
		     "SELECT * FROM b.processes; CREATE TABLE sync AS SELECT 'a' AS node, * FROM "
		     "a.cuda_calls WHERE kind = 'sync' UNION ALL SELECT 'b', * FROM b.cuda_calls "
		     "WHERE kind = 'sync'; CREATE TABLE procs AS SELECT 'a' AS node, * FROM "
		     "a.processes UNION ALL SELECT 'b', * FROM b.processes",
		     NULL, NULL, NULL);
	sqlite3_close(db);
	db = open_trace("merged.db");
	EQ(db, "SELECT count(*) FROM collectives", 400);
	EQ(db, "SELECT count(DISTINCT comm_hash) FROM collectives", 1);
	EQ(db, "SELECT count(*) FROM collectives WHERE comm_hash = '00112233445566aa'", 400);
	EQ(db, "SELECT count(*) FROM (SELECT ts_ns, dur_ns, rank, seq, busy_ns FROM collectives "
	       "EXCEPT SELECT ts_ns, dur_ns, rank, seq, busy_ns FROM allranks)", 0);
	EQ(db, LATEST_RANK_COUNT "3", 100);
	EQ(db, "SELECT p.rank FROM sync s JOIN procs p ON p.node = s.node AND p.pid = s.pid "
	       "GROUP BY p.rank ORDER BY sum(s.dur_ns) LIMIT 1", 3);
	fqsql_close(db);
}

static void test_hang(void)
{
	sqlite3 *db;

	CHECK_MSG(tracegen("hang.db", "--node h --ranks 4 --steps 50 --hang-rank 1 --hang-at 30 "
		       "--launches 3") == 0, "fq-tracegen failed");
	db = open_trace("hang.db");
	EQ(db, "SELECT count(*) FROM collectives WHERE rank = 1", 30);
	EQ(db, "SELECT max(seq) FROM collectives WHERE rank = 1", 29);
	EQ(db, "SELECT count(*) FROM collectives WHERE rank <> 1", 3 * 31);
	EQ(db, "SELECT min(m) FROM (SELECT max(seq) AS m FROM collectives WHERE rank <> 1 "
	       "GROUP BY rank)", 30);
	EQ(db, "SELECT count(*) FROM cuda_calls c JOIN processes p USING (pid) WHERE p.rank = 1",
	   30 * 4);
	EQ(db, "SELECT count(*) FROM cuda_calls c JOIN processes p USING (pid) WHERE p.rank <> 1",
	   3 * 31 * 4);
	/* nothing from the hung rank after its last collective's sync */
	EQ(db, "SELECT count(*) FROM cuda_calls c JOIN processes p USING (pid) WHERE p.rank = 1 "
	       "AND c.ts_ns > (SELECT max(ts_ns) FROM collectives WHERE rank = 1) AND "
	       "c.kind <> 'sync'", 0);
	/* each peer's last sync is its longest, and long: at least 10 steps */
	EQ(db, "SELECT count(*) FROM (SELECT c.pid, c.dur_ns, max(c.ts_ns) FROM cuda_calls c "
	       "JOIN processes p USING (pid) WHERE c.kind = 'sync' AND p.rank <> 1 GROUP BY c.pid) l "
	       "WHERE l.dur_ns >= 10 * 50000000 AND l.dur_ns = (SELECT max(dur_ns) FROM cuda_calls "
	       "WHERE pid = l.pid)", 3);
	fqsql_close(db);
}

/* A trace without --start-ns ends about now (so `--since 5m` finds it), or at --end. */
static void test_end(void)
{
	int64_t now = (int64_t)time(NULL), end;
	char args[256];
	sqlite3 *db;

	CHECK_MSG(tracegen("now.db",
			   "--node n --ranks 2 --steps 100 --slow-rank 1 --slow-pct 20") == 0,
		  "fq-tracegen failed");
	db = open_trace("now.db");
	end = q(db, "SELECT max(ts_ns + dur_ns) / 1000000000 FROM cuda_calls");
	CHECK_MSG(end >= now - 2 && end <= now + 2, "default end %lld, now %lld", (long long)end,
	      (long long)now);
	fqsql_close(db);
	snprintf(args, sizeof(args), "--node n --ranks 2 --steps 100 --end %lld",
		 (long long)now - 3600);
	CHECK_MSG(tracegen("end.db", args) == 0, "fq-tracegen --end failed");
	db = open_trace("end.db");
	end = q(db, "SELECT max(ts_ns + dur_ns) / 1000000000 FROM cuda_calls");
	CHECK_MSG(end >= now - 3602 && end <= now - 3598, "--end: end %lld", (long long)end);
	fqsql_close(db);
	CHECK_MSG(tracegen("bad.db",
			   "--node x --ranks 2 --steps 5 --end 1 --start-ns 1 2>/dev/null") == 2,
		  "--end with --start-ns");
}

static void test_bad_args(void)
{
	CHECK_MSG(tracegen("bad.db", "--node x --ranks 0 --steps 1 2>/dev/null") == 2, "--ranks 0");
	CHECK_MSG(tracegen("bad.db", "--node x --ranks 2 --rank-base 3 --nranks 4 --steps 1 "
		       "2>/dev/null") == 2, "ranks past nranks");
	CHECK_MSG(tracegen("bad.db", "--node x --ranks 2 --steps 5 --hang-rank 1 --hang-at 5 "
		       "2>/dev/null") == 2, "hang-at past steps");
	CHECK_MSG(tracegen("bad.db", "--node x --ranks 2 --steps 5 --comm-hash xyz 2>/dev/null") ==
			  2,
		  "bad comm hash");
	CHECK_MSG(tracegen("bad.db", "--ranks 2 --steps 5 2>/dev/null") == 2, "no --node");
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: test_sql_tracegen FQ-TRACEGEN WORKDIR\n");
		return 2;
	}
	gen = argv[1];
	dir = argv[2];
	test_single_node();
	test_multi_node();
	test_hang();
	test_end();
	test_bad_args();
	return check_done("test_sql_tracegen");
}
