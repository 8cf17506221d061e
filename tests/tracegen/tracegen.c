/* SPDX-License-Identifier: MIT */
/*
 * fq-tracegen: writes a trace file with the schema agentd writes, for one
 * node of a simulated data-parallel job, following DESIGN.md section 2:
 *
 *   per step, each rank is busy on-CPU (forward/backward launches), enqueues
 *   ncclAllReduce (~25 us: the enqueue only), then blocks in
 *   cudaStreamSynchronize until the all-reduce completes, which happens once
 *   the LAST rank has enqueued. A slow rank is busier, arrives later and waits
 *   least; its peers' waits grow by its delay. A hung rank never enqueues
 *   sequence --hang-at; its peers enqueue it and wait until the trace ends.
 *
 *   With --kernels, fleetq's NCCL profiler plugin is in the job too (nccl_kernels):
 *   each rank's all-reduce kernel starts on its GPU a fixed lag after the enqueue and
 *   ends once every rank's kernel has started, plus the transfer; the rank that arrives
 *   last has the shortest kernel. --gpu-slow-rank makes one GPU's compute before the
 *   collective P% of a step slower: its CPU side is unchanged and every rank's sync
 *   returns later by the same amount (as a job that synchronizes every step sees it), so
 *   only the kernels tell. Each GPU's clock has its own offset.
 *
 *   With --busy-frac F, fleetq's CUDA injection library is in the job too (gpu_busy): each
 *   GPU runs compute kernels for F of a step before its collective kernel starts (a slower
 *   GPU for F plus its P% more), and the rows are its 200 ms slices of that time.
 *
 * Every node simulates the whole job and writes only its own ranks, and all
 * noise is a hash of (seed, rank, seq), so files generated on several "nodes"
 * with the same job arguments and their own --rank-base form one job.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fqsql.h"

struct opts {
	const char *out;
	const char *node;
	const char *job_id;
	char comm_hash[17];
	int ranks, rank_base, nranks, launches, wal, colls;
	int64_t steps, hang_at, start_ns, step_ns, end_s;
	int slow_rank, hang_rank;
	double slow_pct;
	int kernels, gpu_slow_rank;
	double gpu_slow_pct, busy_frac;
	uint64_t seed;
};

/* Fractions of --step-ns that make up a clean step. */
#define BUSY_FRAC 0.55
#define COLL_FRAC 0.35
#define POST_FRAC 0.10
#define ENQ_NS 25000
#define PREEMPT_EVERY 10
#define GPU_LAG_FRAC 0.05 /* --kernels: enqueue to the kernel's start on the GPU */
#define XFER_FRAC 0.04    /* ... the last start to the kernel's end */

static const char usage[] =
	"usage: fq-tracegen --out FILE --node NAME --ranks R --steps S [--rank-base B]\n"
	"                   [--nranks N] [--comm-hash HEX16] [--slow-rank R --slow-pct P]\n"
	"                   [--hang-rank R --hang-at SEQ] [--seed N] [--end SEC | --start-ns T]\n"
	"                   [--step-ns NS] [--launches K] [--colls-per-step K] [--job-id ID]\n"
	"                   [--wal]\n"
	"Writes ranks B..B+R-1 of an N-rank job (default N = B + R) running S steps.\n"
	"Generate every node with the same job arguments and its own --node/--rank-base.\n"
	"  --end SEC                   the job ends at about SEC, in seconds since the epoch\n"
	"                              (default: now); give every node of one job the same\n"
	"  --start-ns T                the job starts at T, in ns since the epoch\n"
	"  --slow-rank R --slow-pct P  rank R spends P%% of a step longer on-CPU per step\n"
	"  --hang-rank R --hang-at SEQ rank R never enqueues collective SEQ; its peers do\n"
	"                              and wait in cudaStreamSynchronize until the end\n"
	"  --launches K                cuLaunchKernel rows per rank per collective (default 2)\n"
	"  --colls-per-step K          K all-reduces a step, each of its own size, as DDP's\n"
	"                              buckets (default 1): the first after half the step,\n"
	"                              the others in the rest; --slow-pct once a step\n"
	"  --kernels                   nccl_kernels rows (fleetq's NCCL profiler plugin)\n"
	"  --gpu-slow-rank R --gpu-slow-pct P  rank R's GPU takes P%% of a step longer\n"
	"  --busy-frac F               gpu_busy rows (fleetq's CUDA injection library): each\n"
	"                              GPU computes F of a step before its collective kernel\n"
	"  --wal                       leave the file in WAL mode (default: rollback journal)\n";

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* Uniform in [0, 1), a function of (seed, rank, seq, what) only. */
static double noise(const struct opts *o, int rank, int64_t seq, int what)
{
	uint64_t h = mix(o->seed ^ mix(((uint64_t)rank << 40) ^ mix((uint64_t)seq * 16 + what)));

	return (double)(h >> 11) * 0x1.0p-53;
}

enum { N_BUSY, N_ENQ, N_SYNCGAP, N_SYNCEND, N_POST, N_LAUNCH, N_PREEMPT, N_PREEMPT_AT, N_GPU };

static int64_t parse_i64(const char *name, const char *s, int64_t min)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(s, &end, 0);
	if (errno || *end || end == s || v < min) {
		fprintf(stderr, "fq-tracegen: --%s '%s': give an integer >= %" PRId64 "\n", name, s,
			min);
		exit(2);
	}
	return v;
}

/*
 * The job ends at about --end (default: now), so that a newcomer's
 * `--since 5m` finds it: a step lasts --step-ns plus the slow rank's extra
 * time. Whole seconds, so that nodes generated with one --end line up.
 */
static int64_t default_start(const struct opts *o)
{
	int64_t end = o->end_s >= 0 ? o->end_s : (int64_t)time(NULL);
	double step = o->step_ns * (1 + o->slow_pct / 100.0) + o->colls * (ENQ_NS + 10000);

	return end * 1000000000ll - (int64_t)(step * (double)o->steps);
}

static void parse(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
		{ "end", 1, 0, 'E' },
		{ "out", 1, 0, 'o' },	    { "node", 1, 0, 'n' },	{ "ranks", 1, 0, 'r' },
		{ "rank-base", 1, 0, 'b' }, { "nranks", 1, 0, 'N' },	{ "steps", 1, 0, 's' },
		{ "comm-hash", 1, 0, 'c' }, { "slow-rank", 1, 0, 'S' }, { "slow-pct", 1, 0, 'p' },
		{ "hang-rank", 1, 0, 'H' }, { "hang-at", 1, 0, 'a' },	{ "seed", 1, 0, 'e' },
		{ "start-ns", 1, 0, 't' },  { "step-ns", 1, 0, 'T' },	{ "launches", 1, 0, 'L' },
		{ "job-id", 1, 0, 'j' },    { "wal", 0, 0, 'w' },	{ "help", 0, 0, 'h' },
		{ "kernels", 0, 0, 'K' },   { "gpu-slow-rank", 1, 0, 'G' },
		{ "gpu-slow-pct", 1, 0, 'g' }, { "busy-frac", 1, 0, 'B' },
		{ "colls-per-step", 1, 0, 'C' },
		{ 0, 0, 0, 0 },
	};
	const char *hash = NULL;
	char *end;
	int c;

	memset(o, 0, sizeof(*o));
	o->nranks = -1;
	o->slow_rank = o->hang_rank = o->gpu_slow_rank = -1;
	o->hang_at = -1;
	o->seed = 1;
	o->start_ns = -1;
	o->end_s = -1;
	o->step_ns = 50000000;
	o->launches = 2;
	o->colls = 1;
	o->job_id = "4242";
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 'o': o->out = optarg; break;
		case 'n': o->node = optarg; break;
		case 'r': o->ranks = (int)parse_i64("ranks", optarg, 1); break;
		case 'b': o->rank_base = (int)parse_i64("rank-base", optarg, 0); break;
		case 'N': o->nranks = (int)parse_i64("nranks", optarg, 1); break;
		case 's': o->steps = parse_i64("steps", optarg, 1); break;
		case 'c': hash = optarg; break;
		case 'S': o->slow_rank = (int)parse_i64("slow-rank", optarg, 0); break;
		case 'p':
			o->slow_pct = strtod(optarg, &end);
			if (*end || end == optarg || !(o->slow_pct >= 0)) {
				fprintf(stderr, "fq-tracegen: --slow-pct '%s': give a percentage "
					">= 0\n", optarg);
				exit(2);
			}
			break;
		case 'H': o->hang_rank = (int)parse_i64("hang-rank", optarg, 0); break;
		case 'a': o->hang_at = parse_i64("hang-at", optarg, 0); break;
		case 'e': o->seed = (uint64_t)parse_i64("seed", optarg, 0); break;
		case 't': o->start_ns = parse_i64("start-ns", optarg, 0); break;
		case 'T': o->step_ns = parse_i64("step-ns", optarg, 1000000); break;
		case 'E': o->end_s = parse_i64("end", optarg, 0); break;
		case 'L': o->launches = (int)parse_i64("launches", optarg, 0); break;
		case 'C': o->colls = (int)parse_i64("colls-per-step", optarg, 1); break;
		case 'j': o->job_id = optarg; break;
		case 'w': o->wal = 1; break;
		case 'K': o->kernels = 1; break;
		case 'G':
			o->gpu_slow_rank = (int)parse_i64("gpu-slow-rank", optarg, 0);
			o->kernels = 1;
			break;
		case 'g':
			o->gpu_slow_pct = strtod(optarg, &end);
			if (*end || end == optarg || !(o->gpu_slow_pct >= 0)) {
				fprintf(stderr, "fq-tracegen: --gpu-slow-pct '%s': give a percentage "
					">= 0\n", optarg);
				exit(2);
			}
			break;
		case 'B':
			o->busy_frac = strtod(optarg, &end);
			if (*end || end == optarg || !(o->busy_frac > 0 && o->busy_frac < 0.9)) {
				fprintf(stderr, "fq-tracegen: --busy-frac '%s': give a share of a step "
					"above 0 and below 0.9\n", optarg);
				exit(2);
			}
			o->kernels = 1;
			break;
		case 'h': fputs(usage, stdout); exit(0);
		default: fputs(usage, stderr); exit(2);
		}
	}
	if (optind < argc || !o->out || !o->node || !o->ranks || !o->steps) {
		fputs(usage, stderr);
		exit(2);
	}
	if (o->nranks < 0)
		o->nranks = o->rank_base + o->ranks;
	if (o->rank_base + o->ranks > o->nranks) {
		fprintf(stderr, "fq-tracegen: ranks %d..%d do not fit a job of --nranks %d\n",
			o->rank_base, o->rank_base + o->ranks - 1, o->nranks);
		exit(2);
	}
	if (o->slow_rank >= o->nranks || o->hang_rank >= o->nranks) {
		fprintf(stderr, "fq-tracegen: --slow-rank/--hang-rank must be below --nranks %d\n",
			o->nranks);
		exit(2);
	}
	if ((o->hang_rank >= 0) != (o->hang_at >= 0) || o->hang_at >= o->steps * o->colls) {
		fprintf(stderr, "fq-tracegen: give --hang-rank and --hang-at together, with "
			"--hang-at below --steps times --colls-per-step\n");
		exit(2);
	}
	if (o->start_ns >= 0 && o->end_s >= 0) {
		fprintf(stderr, "fq-tracegen: give --end or --start-ns, not both\n");
		exit(2);
	}
	if (o->start_ns < 0)
		o->start_ns = default_start(o);
	if (hash) {
		if (strlen(hash) != 16 || strspn(hash, "0123456789abcdefABCDEF") != 16) {
			fprintf(stderr, "fq-tracegen: --comm-hash '%s': give 16 hex digits\n", hash);
			exit(2);
		}
		for (int i = 0; i < 16; i++)
			o->comm_hash[i] = (char)(hash[i] | 0x20);
	} else {
		/* the same seed gives the same communicator on every node */
		snprintf(o->comm_hash, sizeof(o->comm_hash), "%016" PRIx64, mix(o->seed ^ 0xcc));
	}
}

enum { S_META, S_PROC, S_COMM, S_COLL, S_CUDA, S_OFF, S_KERN, S_BUSY, S_N };

struct gen {
	const struct opts *o;
	sqlite3 *db;
	sqlite3_stmt *st[S_N];
	int64_t rows[S_N];
	int64_t ts; /* ts_ns bound to the keyed statement (bind_ts) */
};

static void bind_ts(struct gen *g, int which, int64_t ts)
{
	g->ts = ts;
	sqlite3_bind_int64(g->st[which], 1, ts);
}

static int step_reset(struct gen *g, int which)
{
	sqlite3_stmt *st = g->st[which];
	int rc = sqlite3_step(st);

	sqlite3_reset(st);
	/* ts_ns keys these tables (schema version 2): as agentd does, a row whose
	 * nanosecond another rank of this file took moves to the next free one */
	while (rc == SQLITE_CONSTRAINT &&
	       (which == S_COLL || which == S_CUDA || which == S_OFF || which == S_KERN) &&
	       sqlite3_extended_errcode(g->db) == SQLITE_CONSTRAINT_PRIMARYKEY) {
		bind_ts(g, which, g->ts + 1);
		rc = sqlite3_step(st);
		sqlite3_reset(st);
	}
	sqlite3_clear_bindings(st);
	if (rc != SQLITE_DONE) {
		fprintf(stderr, "fq-tracegen: cannot write '%s': %s\n", g->o->out,
			sqlite3_errmsg(g->db));
		return -EIO;
	}
	g->rows[which]++;
	return 0;
}

static int64_t pid_of(int local)
{
	return 4000 + 16 * (int64_t)local;
}

static int put_cuda(struct gen *g, int64_t ts, int64_t dur, int64_t pid, const char *api,
		    const char *kind, int64_t stream)
{
	sqlite3_stmt *st = g->st[S_CUDA];

	bind_ts(g, S_CUDA, ts);
	sqlite3_bind_int64(st, 2, dur);
	sqlite3_bind_int64(st, 3, pid);
	sqlite3_bind_int64(st, 4, pid);
	sqlite3_bind_text(st, 5, api, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 6, kind, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 7, stream);
	return step_reset(g, S_CUDA);
}

static int put_static(struct gen *g, const char *cmdline)
{
	const struct opts *o = g->o;
	sqlite3_stmt *st;
	char buf[64];
	const char *meta[][2] = {
		{ "node", o->node }, { "clock_source", "generated" },
		{ "generator", "fq-tracegen" }, { "job_id", o->job_id }, { "args", cmdline },
	};

	for (size_t i = 0; i < sizeof(meta) / sizeof(meta[0]); i++) {
		st = g->st[S_META];
		sqlite3_bind_text(st, 1, meta[i][0], -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 2, meta[i][1], -1, SQLITE_STATIC);
		if (step_reset(g, S_META) < 0)
			return -EIO;
	}
	for (int l = 0; l < o->ranks; l++) {
		int rank = o->rank_base + l;
		int64_t pid = pid_of(l);

		st = g->st[S_PROC];
		snprintf(buf, sizeof(buf), "python3 train.py --local-rank %d", l);
		sqlite3_bind_int64(st, 1, pid);
		sqlite3_bind_int64(st, 2, o->start_ns - 5000000000ll);
		sqlite3_bind_int64(st, 3, 1000);
		sqlite3_bind_text(st, 4, "python3", -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 5, buf, -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(st, 6, "/system.slice/fleetq-job.scope", -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 7, 7000 + l);
		sqlite3_bind_int(st, 8, rank);
		sqlite3_bind_int(st, 9, l);
		sqlite3_bind_int(st, 10, o->nranks);
		sqlite3_bind_text(st, 11, o->job_id, -1, SQLITE_STATIC);
		if (step_reset(g, S_PROC) < 0)
			return -EIO;

		st = g->st[S_COMM];
		sqlite3_bind_int64(st, 1, o->start_ns - 3000000000ll + l * 1000000ll);
		sqlite3_bind_int64(st, 2, 1200000000ll + (int64_t)(noise(o, rank, -1, 0) * 1e8));
		sqlite3_bind_int64(st, 3, pid);
		sqlite3_bind_int64(st, 4, pid);
		sqlite3_bind_int64(st, 5, 0x55d0c0000000ll + l * 0x1000);
		sqlite3_bind_text(st, 6, o->comm_hash, -1, SQLITE_STATIC);
		sqlite3_bind_int(st, 7, rank);
		sqlite3_bind_int(st, 8, o->nranks);
		sqlite3_bind_text(st, 9, "ncclCommInitRankConfig", -1, SQLITE_STATIC);
		if (step_reset(g, S_COMM) < 0)
			return -EIO;
	}
	return 0;
}

struct rankstate {
	int64_t start;	    /* this step begins (previous sync returned, post-processing done) */
	int64_t ts, enq;    /* enqueue of this step */
	int64_t busy_wall;  /* start -> ts */
	int64_t prev_ret;   /* return of the previous collective */
	int64_t prev_ts;    /* enqueue of the previous collective */
	int64_t prev_wait;  /* sync wait since then */
	int64_t gpu_arr;    /* --kernels: the collective kernel starts on the GPU */
	int64_t sync_start, sync_end;
	int64_t bslice, bbusy; /* --busy-frac: the open 200 ms slice of its GPU, its compute */
	int nkern;	       /* ... kernels started in it */
};

#define SLICE_NS 200000000ll

/* Writes local rank l's open slice (ts_ns: the slice, + l, unique in this file). */
static int put_busy(struct gen *g, int l, struct rankstate *s)
{
	sqlite3_stmt *st = g->st[S_BUSY];
	int rc;

	if (!s->bslice)
		return 0;
	sqlite3_bind_int64(st, 1, s->bslice + l);
	sqlite3_bind_int64(st, 2, pid_of(l));
	sqlite3_bind_int64(st, 3, s->bbusy);
	sqlite3_bind_int(st, 4, s->nkern);
	rc = sqlite3_step(st);
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	s->bslice = s->bbusy = 0;
	s->nkern = 0;
	if (rc != SQLITE_DONE) {
		fprintf(stderr, "fq-tracegen: cannot write '%s': %s\n", g->o->out,
			sqlite3_errmsg(g->db));
		return -EIO;
	}
	g->rows[S_BUSY]++;
	return 0;
}

/* Adds [a, b) of compute to local rank l's slices. */
static int add_busy(struct gen *g, int l, struct rankstate *s, int64_t a, int64_t b)
{
	int ret = 0;

	s->nkern++;
	while (a < b && !ret) {
		int64_t sl = a - a % SLICE_NS, piece;

		if (sl != s->bslice) {
			ret = put_busy(g, l, s);
			s->bslice = sl;
		}
		piece = (b < sl + SLICE_NS ? b : sl + SLICE_NS) - a;
		s->bbusy += piece;
		a += piece;
	}
	return ret;
}

static int simulate(struct gen *g)
{
	const struct opts *o = g->o;
	struct rankstate *r = calloc(o->nranks, sizeof(*r));
	int64_t nseq = o->steps * o->colls, last = o->hang_at >= 0 ? o->hang_at : nseq - 1;
	int ret = 0;

	if (!r)
		return -ENOMEM;
	for (int i = 0; i < o->nranks; i++)
		r[i].start = o->start_ns + (int64_t)(noise(o, i, -2, 0) * 20000);
	for (int64_t seq = 0; seq <= last && !ret; seq++) {
		int hang = seq == o->hang_at, j = (int)(seq % o->colls);
		int64_t done = 0, trace_end, gpu_end = 0;
		/* this collective's share of the step: with --colls-per-step K, the first of a
		 * step (after the forward) half of it, the other K - 1 (the buckets) the rest */
		double sn = o->colls == 1 ? (double)o->step_ns
			    : (double)o->step_ns * (j ? 0.5 / (o->colls - 1) : 0.5);

		for (int i = 0; i < o->nranks; i++) {
			double busy = BUSY_FRAC * sn * (0.98 + 0.04 * noise(o, i, seq, N_BUSY));

			/* (P % of the whole step, once a step) */
			if (i == o->slow_rank && !j)
				busy += o->slow_pct / 100.0 * o->step_ns;
			r[i].busy_wall = (int64_t)busy;
			r[i].ts = r[i].start + r[i].busy_wall;
			r[i].enq = ENQ_NS - 2000 + (int64_t)(noise(o, i, seq, N_ENQ) * 6000);
			r[i].sync_start = r[i].ts + r[i].enq + 3000 +
					  (int64_t)(noise(o, i, seq, N_SYNCGAP) * 2000);
			if (hang && i == o->hang_rank)
				continue;
			if (r[i].ts + r[i].enq > done)
				done = r[i].ts + r[i].enq;
		}
		/* the all-reduce runs once the last rank has enqueued; a hang never completes */
		done += (int64_t)(COLL_FRAC * sn);
		/* GPU side: each kernel starts a lag after its enqueue (a slow GPU's later) and
		 * ends when the last one started, plus the transfer; a slow GPU delays everyone's
		 * completion, so every sync returns later by the same amount */
		if (o->kernels) {
			int64_t last_arr = 0, last_clean = 0;

			for (int i = 0; i < o->nranks; i++) {
				r[i].gpu_arr = r[i].ts + r[i].enq +
					       (int64_t)(GPU_LAG_FRAC * sn) +
					       (int64_t)(noise(o, i, seq, N_GPU) * 20000);
				if (hang && i == o->hang_rank)
					continue;
				if (r[i].gpu_arr > last_clean)
					last_clean = r[i].gpu_arr;
				if (i == o->gpu_slow_rank)
					r[i].gpu_arr += (int64_t)(o->gpu_slow_pct / 100.0 * sn);
				if (r[i].gpu_arr > last_arr)
					last_arr = r[i].gpu_arr;
			}
			gpu_end = last_arr + (int64_t)(XFER_FRAC * sn);
			done += last_arr - last_clean;
		}
		trace_end = r[0].start + (nseq - seq > 10 ? nseq - seq : 10) * o->step_ns / o->colls;
		for (int l = 0; l < o->ranks && !ret; l++) {
			int rank = o->rank_base + l;
			struct rankstate *s = &r[rank];
			int64_t pid = pid_of(l), stream = 0x7f3a00000000ll + l * 0x100;
			int64_t preempt = 0, busy_ns;
			sqlite3_stmt *st;

			if (hang && rank == o->hang_rank)
				continue;
			for (int k = 0; k < o->launches && !ret; k++)
				ret = put_cuda(g, s->start + (k + 1) * s->busy_wall / (o->launches + 1),
					       4000 + (int64_t)(noise(o, rank, seq, N_LAUNCH + k * 8) *
								4000),
					       pid, "cuLaunchKernel", "launch", stream);
			if (seq % PREEMPT_EVERY == PREEMPT_EVERY - 1) {
				preempt = 20000 + (int64_t)(noise(o, rank, seq, N_PREEMPT) * 180000);
				st = g->st[S_OFF];
				bind_ts(g, S_OFF, s->start + (int64_t)(s->busy_wall * (0.2 +
					0.6 * noise(o, rank, seq, N_PREEMPT_AT))));
				sqlite3_bind_int64(st, 2, preempt);
				sqlite3_bind_int64(st, 3, pid);
				sqlite3_bind_int64(st, 4, pid);
				sqlite3_bind_text(st, 5, "preempted", -1, SQLITE_STATIC);
				ret = ret ?: step_reset(g, S_OFF);
			}
			/* on-CPU since the previous collective: everything but the sync wait */
			busy_ns = seq ? s->ts - s->prev_ret - s->prev_wait : s->busy_wall;
			busy_ns -= preempt;
			st = g->st[S_COLL];
			bind_ts(g, S_COLL, s->ts);
			sqlite3_bind_int64(st, 2, s->enq);
			sqlite3_bind_int64(st, 3, pid);
			sqlite3_bind_int64(st, 4, pid);
			sqlite3_bind_int64(st, 5, 0x55d0c0000000ll + l * 0x1000);
			sqlite3_bind_text(st, 6, o->comm_hash, -1, SQLITE_STATIC);
			sqlite3_bind_int(st, 7, rank);
			sqlite3_bind_int(st, 8, o->nranks);
			sqlite3_bind_int64(st, 9, seq);
			sqlite3_bind_text(st, 10, "AllReduce", -1, SQLITE_STATIC);
			/* (the buckets of a step: each its own size, so the step shows) */
			sqlite3_bind_int64(st, 11, o->colls == 1 ? 25165824 : 1048576ll * (j + 1));
			sqlite3_bind_int64(st, 12, (o->colls == 1 ? 25165824 : 1048576ll * (j + 1)) * 4);
			sqlite3_bind_text(st, 13, "float32", -1, SQLITE_STATIC);
			sqlite3_bind_text(st, 14, "sum", -1, SQLITE_STATIC);
			sqlite3_bind_int64(st, 15, stream);
			sqlite3_bind_int64(st, 16, busy_ns);
			/* sync wait and time since the previous collective: that step's sync
			 * call, its enqueue */
			if (seq) {
				sqlite3_bind_int64(st, 17, s->prev_wait);
				sqlite3_bind_int64(st, 18, s->ts - s->prev_ts);
			}
			ret = ret ?: step_reset(g, S_COLL);
			if (o->kernels && !hang && !ret) {
				st = g->st[S_KERN];
				bind_ts(g, S_KERN, s->ts);
				sqlite3_bind_int64(st, 2, s->enq);
				sqlite3_bind_int64(st, 3, pid);
				sqlite3_bind_int(st, 4, rank);
				sqlite3_bind_int(st, 5, o->nranks);
				sqlite3_bind_text(st, 6, o->comm_hash, -1, SQLITE_STATIC);
				sqlite3_bind_text(st, 7, o->comm_hash, -1, SQLITE_STATIC);
				sqlite3_bind_int64(st, 8, seq);
				/* each GPU's globaltimer has its own offset */
				sqlite3_bind_int64(st, 9, s->gpu_arr + 137000 * (int64_t)rank);
				sqlite3_bind_int64(st, 10, gpu_end - s->gpu_arr);
				sqlite3_bind_int64(st, 11, 2 * (gpu_end - s->gpu_arr));
				ret = step_reset(g, S_KERN);
				/* its GPU's compute before the kernel (a slower one's longer) */
				if (o->busy_frac > 0 && !ret) {
					double f = o->busy_frac + (rank == o->gpu_slow_rank ?
								   o->gpu_slow_pct / 100.0 : 0);

					ret = add_busy(g, l, s, s->gpu_arr - (int64_t)(f * sn),
						       s->gpu_arr);
				}
			}
			s->sync_end = hang ? trace_end :
					     done + 2000 + (int64_t)(noise(o, rank, seq, N_SYNCEND) *
								     8000);
			ret = ret ?: put_cuda(g, s->sync_start, s->sync_end - s->sync_start, pid,
					      "cudaStreamSynchronize", "sync", stream);
		}
		for (int i = 0; i < o->nranks; i++) {
			struct rankstate *s = &r[i];
			int64_t end = done + 2000 + (int64_t)(noise(o, i, seq, N_SYNCEND) * 8000);

			s->prev_ret = s->ts + s->enq;
			s->prev_ts = s->ts;
			s->prev_wait = end - s->sync_start;
			s->start = end + (int64_t)(POST_FRAC * sn *
						   (0.98 + 0.04 * noise(o, i, seq, N_POST)));
		}
	}
	for (int l = 0; l < o->ranks && !ret; l++)
		ret = put_busy(g, l, &r[o->rank_base + l]);
	free(r);
	return ret;
}

static const char *const inserts[S_N] = {
	[S_META] = "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
	[S_PROC] = "INSERT INTO processes (pid, start_ns, ppid, comm, cmdline, cgroup, cgroup_id, "
		   "rank, local_rank, world_size, job_id) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
	[S_COMM] = "INSERT INTO comms (ts_ns, dur_ns, pid, tid, comm_ptr, comm_hash, rank, nranks, "
		   "fn, ret) VALUES (?,?,?,?,?,?,?,?,?,0)",
	[S_COLL] = "INSERT INTO collectives (ts_ns, dur_ns, pid, tid, comm_ptr, comm_hash, rank, "
		   "nranks, seq, op, count, bytes, datatype, redop, stream, busy_ns, sync_ns, "
		   "gap_ns, cpu_ns, ret) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?16,0)",
	[S_CUDA] = "INSERT INTO cuda_calls (ts_ns, dur_ns, pid, tid, api, kind, stream, ret) "
		   "VALUES (?,?,?,?,?,?,?,0)",
	[S_OFF] = "INSERT INTO offcpu (ts_ns, dur_ns, pid, tid, reason) VALUES (?,?,?,?,?)",
	[S_KERN] = "INSERT INTO nccl_kernels (ts_ns, host_dur_ns, pid, rank, nranks, nccl_comm, "
		   "comm_hash, op, seq, count, nchannels, gpu_start_ns, gpu_dur_ns, gpu_ch_ns, "
		   "partial) VALUES (?,?,?,?,?,?,?,'AllReduce',?,25165824,2,?,?,?,0)",
	[S_BUSY] = "INSERT INTO gpu_busy (ts_ns, dur_ns, pid, device, busy_ns, nccl_ns, kernels, "
		   "nccl_kernels, dropped, late_ns) VALUES (?1,200000000,?2,0,?3,0,?4,0,0,0)",
};

/* Runs, as SQL, the text query returns (one row, or NULL for nothing to do). */
static int exec_query(sqlite3 *db, const char *query)
{
	sqlite3_stmt *st = NULL;
	char *sql = NULL;
	int rc = sqlite3_prepare_v2(db, query, -1, &st, NULL);

	/* copy and finalize first: a DROP fails while a statement reads the schema */
	if (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
		sql = sqlite3_mprintf("%s", sqlite3_column_text(st, 0));
	sqlite3_finalize(st);
	if (rc == SQLITE_OK && sql)
		rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
	sqlite3_free(sql);
	return rc == SQLITE_OK ? 0 : -EIO;
}

int main(int argc, char **argv)
{
	struct opts o;
	struct gen g = { .o = &o };
	struct timespec t0, t1;
	char *tmp = NULL, *cause = NULL, *cmdline = NULL;
	size_t len = 0;
	FILE *f;
	int ret = 1;

	parse(argc, argv, &o);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	f = open_memstream(&cmdline, &len);
	for (int i = 0; f && i < argc; i++)
		fprintf(f, "%s%s", i ? " " : "", argv[i]);
	if (!f || fclose(f) || asprintf(&tmp, "%s.tmp", o.out) < 0) {
		fprintf(stderr, "fq-tracegen: out of memory\n");
		return 1;
	}
	/* build beside the target and rename: readers never see half a file */
	unlink(tmp);
	if (sqlite3_open(tmp, &g.db) != SQLITE_OK) {
		fprintf(stderr, "fq-tracegen: cannot create '%s': %s\n", tmp, sqlite3_errmsg(g.db));
		goto out;
	}
	if (sqlite3_exec(g.db, "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; "
			 "PRAGMA cache_size = -65536; PRAGMA locking_mode = EXCLUSIVE; BEGIN",
			 NULL, NULL, NULL) != SQLITE_OK ||
	    fqsql_schema_apply(g.db, &cause) < 0) {
		fprintf(stderr, "fq-tracegen: cannot write '%s': %s\n", tmp,
			cause ? cause : sqlite3_errmsg(g.db));
		goto out;
	}
	/* building indexes once at the end is cheaper than updating them per row */
	if (sqlite3_exec(g.db, "CREATE TEMP TABLE fq_indexes AS SELECT name, sql FROM sqlite_schema "
			 "WHERE type = 'index' AND sql IS NOT NULL", NULL, NULL, NULL) != SQLITE_OK ||
	    exec_query(g.db, "SELECT group_concat('DROP INDEX main.\"' || name || '\"', ';') "
		       "FROM temp.fq_indexes") < 0) {
		fprintf(stderr, "fq-tracegen: cannot write '%s': %s\n", tmp, sqlite3_errmsg(g.db));
		goto out;
	}
	for (int i = 0; i < S_N; i++) {
		if (sqlite3_prepare_v2(g.db, inserts[i], -1, &g.st[i], NULL) != SQLITE_OK) {
			fprintf(stderr, "fq-tracegen: schema mismatch: %s\n", sqlite3_errmsg(g.db));
			goto out;
		}
	}
	if (put_static(&g, cmdline) < 0 || simulate(&g) < 0)
		goto out;
	for (int i = 0; i < S_N; i++) {
		sqlite3_finalize(g.st[i]);
		g.st[i] = NULL;
	}
	if (exec_query(g.db, "SELECT group_concat(sql, ';') FROM temp.fq_indexes") < 0 ||
	    sqlite3_exec(g.db, "DROP TABLE temp.fq_indexes; COMMIT; PRAGMA locking_mode = NORMAL",
			 NULL, NULL, NULL) !=
		    SQLITE_OK ||
	    sqlite3_exec(g.db, o.wal ? "PRAGMA journal_mode = WAL" : "PRAGMA journal_mode = DELETE",
			 NULL, NULL, NULL) != SQLITE_OK) {
		fprintf(stderr, "fq-tracegen: cannot finish '%s': %s\n", tmp, sqlite3_errmsg(g.db));
		goto out;
	}
	if (sqlite3_close(g.db) != SQLITE_OK) {
		fprintf(stderr, "fq-tracegen: cannot close '%s'\n", tmp);
		g.db = NULL;
		goto out;
	}
	g.db = NULL;
	if (rename(tmp, o.out) < 0) {
		fprintf(stderr, "fq-tracegen: cannot rename '%s' to '%s': %s\n", tmp, o.out,
			strerror(errno));
		goto out;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("fq-tracegen: wrote %s: %" PRId64 " collectives, %" PRId64 " cuda_calls, %" PRId64
	       " offcpu rows for ranks %d..%d of %d in %.2f s\n",
	       o.out, g.rows[S_COLL], g.rows[S_CUDA], g.rows[S_OFF], o.rank_base,
	       o.rank_base + o.ranks - 1, o.nranks,
	       (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
	ret = 0;
out:
	for (int i = 0; i < S_N; i++)
		sqlite3_finalize(g.st[i]);
	if (g.db) {
		sqlite3_close(g.db);
		unlink(tmp);
	}
	free(tmp);
	free(cause);
	free(cmdline);
	return ret;
}
