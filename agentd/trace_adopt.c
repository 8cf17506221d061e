/* SPDX-License-Identifier: MIT */
/*
 * Communicators whose init agentd did not see: it started, or restarted, while the job ran.
 * Their calls carry no rank and no seq, so no analysis can place them, and a job traced from
 * the middle would get no verdict for the rest of its life (weeks, for a training run).
 *
 * fleetq's NCCL profiler plugin numbers every collective of a communicator from its init
 * (coll_idx: the seq agentd gives a collective on a communicator it saw created) and knows
 * its rank, its size and NCCL's hash. One of its records and a CPU-side call of the same
 * process are the same collective when op and count agree and the plugin's Coll event
 * started inside the call: NCCL starts it there for a call outside a group (hostStreamPlanTask
 * right after the kernel's launch; a grouped call's starts at ncclGroupEnd and matches
 * nothing here, nor does a CUDA graph's). Two such matches in a row that agree on the
 * offset, each the only candidate call in the process, adopt the communicator: its next
 * calls get seq, rank and nranks as if agentd had seen the init. It keeps the name an
 * earlier agent gave it in the same trace file (agentd restarted: store_comm_name, by pid and
 * NCCL's hash), so a window across the restart sees one communicator; else it is named by
 * NCCL's hash (fleetq's needs the init's unique id). The calls before the second match stay
 * unplaced. Without the plugin nothing is adopted.
 *
 * Where the counts differ agentd would number wrong: an ncclAllReduce with count 0 (NCCL
 * makes no task of it) or NCCL 2.28's ncclAlltoAll, ncclGather and ncclScatter (Send/Recv
 * inside) before the match. The two agreeing matches make a wrong offset unlikely, not
 * impossible; the log says which communicator was adopted and from which seq on.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "fqtrace.h"
#include "store.h"
#include "trace_int.h"

#define RECENT 32	    /* calls remembered per communicator */
#define SLACK_NS 100000LL /* the plugin's clock against the probes' */

struct adopt_call {
	const char *op;
	int64_t count, ts, dur, idx, tid;
};

struct adopt {
	struct comm_ent *ce;
	struct adopt *next;
	int64_t seen; /* collectives so far */
	int64_t base; /* coll_idx - idx of the last match */
	int hits;     /* matches in a row that agreed on base */
	struct adopt_call recent[RECENT];
};

/* A collective on ce, whose init agentd did not see. */
void adopt_note_call(struct tracer *t, struct comm_ent *ce, const char *op, int64_t count,
		     int64_t ts_ns, int64_t dur_ns, int64_t tid)
{
	struct adopt *a = ce->adopt;

	if (!a) {
		struct rec r = { .kind = REC_COMM };

		if (!(a = calloc(1, sizeof(*a))))
			return;
		a->ce = ce;
		a->next = t->adopting;
		t->adopting = a;
		ce->adopt = a;
		/* a comms row at its first call: the process calls collectives on a communicator
		 * made before agentd (the analysis reads a restart from it: stragglers.node.sql) */
		r.u.comm = (struct rec_comm){
			.ts_ns = ts_ns,
			.pid = ce->pid,
			.tid = tid,
			.comm_ptr = (int64_t)ce->ptr,
			.dur_ns = REC_NULL,
			.rank = REC_NULL,
			.nranks = REC_NULL,
			.fn = "init-unseen",
			.ret = REC_NULL,
		};
		store_put(t->store, &r);
	}
	a->recent[a->seen % RECENT] = (struct adopt_call){
		.op = op, .count = count, .ts = ts_ns, .dur = dur_ns, .idx = a->seen, .tid = tid
	};
	a->seen++;
}

void adopt_forget(struct tracer *t, struct comm_ent *ce)
{
	struct adopt **pp;

	if (!ce->adopt)
		return;
	for (pp = &t->adopting; *pp; pp = &(*pp)->next) {
		if (*pp == ce->adopt) {
			*pp = ce->adopt->next;
			break;
		}
	}
	free(ce->adopt);
	ce->adopt = NULL;
}

static void adopt(struct tracer *t, struct adopt *a, const struct fq_prof_rec *p)
{
	struct comm_ent *ce = a->ce;
	struct rec r = { .kind = REC_COMM };
	struct rec_comm *c = &r.u.comm;
	const struct adopt_call *last = &a->recent[(a->seen - 1) % RECENT];
	char nccl[17];
	int kept;

	ce->rank = p->rank;
	ce->nranks = p->nranks;
	ce->nccl_hash = p->nccl_comm;
	snprintf(nccl, sizeof(nccl), "%016" PRIx64, p->nccl_comm);
	/* the name an earlier agent gave it in this file (agentd restarted while the job ran),
	 * so a window across the restart sees one communicator; else NCCL's hash */
	kept = store_comm_name(t->store, ce->pid, p->nccl_comm, ce->hash);
	if (!kept)
		memcpy(ce->hash, nccl, sizeof(ce->hash));
	ce->hash_v = kept ? strtoull(ce->hash, NULL, 16) : p->nccl_comm;
	ce->seq = a->base + a->seen;
	ce->p2p_seq = 0;
	ce->adopted = true;
	ce->split_seq = -1;
	ce->splits_at = 0;
	tlog("communicator %#" PRIx64 " of pid %u was created before agentd saw it: rank %d of "
	     "%d, NCCL's hash %s, placed from seq %" PRId64 " on by fleetq's NCCL profiler plugin%s%s",
	     ce->ptr, ce->pid, p->rank, p->nranks, nccl, ce->seq,
	     kept ? "; named as before, " : "", kept ? ce->hash : "");
	/* a comms row as an init's, its function 'adopted', at its newest call */
	*c = (struct rec_comm){
		.ts_ns = last->ts,
		.dur_ns = 0,
		.pid = ce->pid,
		.tid = last->tid,
		.comm_ptr = (int64_t)ce->ptr,
		.rank = ce->rank,
		.nranks = ce->nranks,
		.fn = "adopted",
		.ret = 0,
	};
	memcpy(c->comm_hash, ce->hash, sizeof(c->comm_hash));
	memcpy(c->nccl_hash, nccl, sizeof(c->nccl_hash));
	store_put(t->store, &r);
	adopt_forget(t, ce);
}

/*
 * A plugin record of pid that joins no communicator agentd knows, its Coll event started at
 * ts_ns (node clock): the communicator it adopts, or NULL.
 */
struct comm_ent *adopt_try(struct tracer *t, uint32_t pid, const struct fq_prof_rec *p,
			   int64_t ts_ns)
{
	struct adopt *hit = NULL;
	int64_t idx = 0;
	int n = 0;

	if (p->size < sizeof(*p) || p->coll_idx > INT64_MAX || p->rank < 0 || p->nranks <= 0 ||
	    p->rank >= p->nranks)
		return NULL;
	for (struct adopt *a = t->adopting; a; a = a->next) {
		if (a->ce->pid != pid || a->ce->seq >= 0)
			continue;
		for (int i = 0; i < RECENT && i < a->seen; i++) {
			const struct adopt_call *c = &a->recent[i];

			if (c->count == (int64_t)p->count && ts_ns >= c->ts - SLACK_NS &&
			    ts_ns <= c->ts + c->dur + SLACK_NS &&
			    !strncmp(c->op, p->func, sizeof(p->func))) {
				hit = a;
				idx = c->idx;
				n++;
			}
		}
	}
	if (n != 1) /* none, or ambiguous: wait for another */
		return NULL;
	if (hit->hits && hit->base == (int64_t)p->coll_idx - idx) {
		struct comm_ent *ce = hit->ce;

		adopt(t, hit, p);
		return ce;
	}
	hit->base = (int64_t)p->coll_idx - idx;
	hit->hits = 1;
	return NULL;
}
