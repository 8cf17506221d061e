/* SPDX-License-Identifier: MIT */
#include "direct.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "merge.h"

/* One ROWS frame of a host, kept until it is printed. */
struct chunk {
	struct chunk *next;
	size_t host;
	size_t len;
	int drop; /* no frame: the merge drops the host's rows inserted so far */
	unsigned char data[];
};

struct host {
	struct chunk *head, **tail;
	struct wire_buf b; /* a relay's rows: the frame being built */
	struct wire_rows w;
	int open;
	int done;
	int64_t rows; /* merged so far: the next row's number (the writer's) */
	int sent;     /* merge: frames went to the writer before the host finished */
	size_t bytes; /* merge: of the frames waiting in head */
};

struct direct {
	struct output *out; /* the consumer: out, or else m */
	struct merge *m;
	size_t held, held_max; /* merge: bytes of frames waiting for their turn, the cap */
	int spilled;	       /* merge: over the cap once: frames no longer wait */
	const char *const *hosts;
	size_t n;
	size_t ncols; /* the table's, node included; 0 until direct_begin() */
	int begun, hold;
	struct host *hs;
	size_t next; /* first host whose rows have not gone to the writer */
	struct wire_value *vals; /* the row being printed */
	/* The writer. Under mu: q, qtail, ending, abandon. */
	pthread_t thread;
	int running;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_cond_t room; /* merge: the writer's queue went below q_max */
	size_t q_bytes;	     /* merge: of the frames in q and being inserted (under mu) */
	size_t q_max;	     /* merge: past this, send() waits for the writer */
	struct chunk *q, **qtail; /* frames to print, in order */
	int ending;		  /* no more frames will come */
	int abandon;		  /* print nothing more */
	int err;		  /* first error of the consumer (atomic: the writer's) */
	char *cause;		  /* the merge's words for err */
};

static struct direct *direct_alloc(size_t n, const char *const *hosts)
{
	struct direct *d = calloc(1, sizeof(*d));

	if (!d)
		return NULL;
	d->hs = calloc(n ? n : 1, sizeof(*d->hs));
	if (!d->hs) {
		free(d);
		errno = ENOMEM;
		return NULL;
	}
	for (size_t i = 0; i < n; i++) {
		d->hs[i].tail = &d->hs[i].head;
		wire_buf_init(&d->hs[i].b);
	}
	d->n = n;
	d->hosts = hosts;
	d->q = NULL;
	d->qtail = &d->q;
	pthread_mutex_init(&d->mu, NULL);
	pthread_cond_init(&d->cv, NULL);
	pthread_cond_init(&d->room, NULL);
	return d;
}

struct direct *direct_new(struct output *out, size_t n, const char *const *hosts, int hold)
{
	struct direct *d = direct_alloc(n, hosts);

	if (d) {
		d->out = out;
		d->hold = hold;
	}
	return d;
}

struct direct *direct_new_merge(struct merge *m, size_t n, const char *const *hosts,
				size_t held_max)
{
	struct direct *d = direct_alloc(n, hosts);

	if (d) {
		d->m = m;
		d->held_max = held_max;
		d->q_max = held_max / 4;
	}
	return d;
}

static void free_chunks(struct chunk *c)
{
	while (c) {
		struct chunk *next = c->next;

		free(c);
		c = next;
	}
}

static void stop_writer(struct direct *d, int abandon)
{
	if (!d->running)
		return;
	pthread_mutex_lock(&d->mu);
	d->ending = 1;
	if (abandon)
		__atomic_store_n(&d->abandon, 1, __ATOMIC_RELAXED);
	pthread_cond_signal(&d->cv);
	pthread_mutex_unlock(&d->mu);
	pthread_join(d->thread, NULL);
	d->running = 0;
}

void direct_free(struct direct *d)
{
	if (!d)
		return;
	stop_writer(d, 1);
	for (size_t i = 0; i < d->n; i++) {
		free_chunks(d->hs[i].head);
		wire_buf_release(&d->hs[i].b);
	}
	free_chunks(d->q);
	free(d->hs);
	free(d->vals);
	free(d->cause);
	pthread_mutex_destroy(&d->mu);
	pthread_cond_destroy(&d->cv);
	pthread_cond_destroy(&d->room);
	free(d);
}

/*
 * Prints the rows of one frame after their node's name, or inserts them into the
 * merge. 0 or an error of the output or the merge.
 */
static int print_chunk(struct direct *d, const struct chunk *c)
{
	struct wire_value *v = d->vals;
	const char *node = d->hosts[c->host];
	struct wire_msg msg;
	int err, r = 0;

	if (c->drop)
		return merge_drop(d->m, c->host, &d->cause);
	/* wire_decode() checked the frame when it arrived (or direct_row() built it) */
	err = wire_rows_reopen(&msg, c->data, c->len);
	if (err)
		return err;
	if (msg.u.rows.ncols + 1 != d->ncols) {
		wire_msg_release(&msg);
		/* The merge's: a host of a column set that lost (gather.c, settle()), whose
		 * frames passed the cap before it lost; its rows are dropped after. */
		return d->m ? 0 : -EBADMSG;
	}
	v[0] = (struct wire_value){ .type = WIRE_TEXT, .p = node, .n = strlen(node) };
	while (!err && (r = wire_rows_next(&msg, v + 1)) == 1) {
		if (d->m) {
			err = merge_row(d->m, c->host, node, d->hs[c->host].rows++, v + 1,
					&d->cause);
			continue;
		}
		/* What the merge database would give back: SQLite stores a NaN as NULL. */
		for (size_t i = 1; i < d->ncols; i++)
			if (v[i].type == WIRE_REAL && isnan(v[i].d))
				v[i].type = WIRE_NULL;
		err = output_row(d->out, v);
	}
	wire_msg_release(&msg);
	return err ? err : r;
}

/* Prints a list of frames and frees them; after an output error, only frees. */
static void print_chunks(struct direct *d, struct chunk *c)
{
	while (c) {
		struct chunk *next = c->next;
		size_t len = c->len;

		if (!d->err && !__atomic_load_n(&d->abandon, __ATOMIC_RELAXED))
			__atomic_store_n(&d->err, print_chunk(d, c), __ATOMIC_RELEASE);
		free(c);
		c = next;
		if (d->m) {
			pthread_mutex_lock(&d->mu);
			d->q_bytes -= len;
			if (d->q_bytes <= d->q_max)
				pthread_cond_signal(&d->room);
			pthread_mutex_unlock(&d->mu);
		}
	}
}

static void *writer(void *arg)
{
	struct direct *d = arg;
	struct chunk *c;

	pthread_mutex_lock(&d->mu);
	for (;;) {
		while (!d->q && !d->ending)
			pthread_cond_wait(&d->cv, &d->mu);
		c = d->q;
		d->q = NULL;
		d->qtail = &d->q;
		if (!c)
			break;
		pthread_mutex_unlock(&d->mu);
		print_chunks(d, c);
		pthread_mutex_lock(&d->mu);
	}
	pthread_mutex_unlock(&d->mu);
	return NULL;
}

int direct_begin(struct direct *d, size_t ncols, const char *const *names)
{
	int err;

	if (d->begun)
		return 0;
	d->vals = calloc(ncols ? ncols : 1, sizeof(*d->vals));
	if (!d->vals)
		return -ENOMEM;
	err = d->out ? output_begin(d->out, ncols, names) : 0;
	if (err)
		return err;
	d->begun = 1;
	d->ncols = ncols;
	/* Without a writer (held, or no thread to be had) everything prints at the end. */
	if (!d->hold && !pthread_create(&d->thread, NULL, writer, d))
		d->running = 1;
	return 0;
}

static void keep(struct host *hs, struct chunk *c)
{
	c->next = NULL;
	*hs->tail = c;
	hs->tail = &c->next;
}

/*
 * Hands a list of frames to the writer, after those it has. The merge's: then waits
 * while the writer is more than q_max bytes behind (the fan-out stops reading, so the
 * agents wait on TCP): frames waiting to be inserted cost memory beside the table.
 */
static void send(struct direct *d, struct chunk *list, struct chunk **tail)
{
	size_t bytes = 0;

	for (struct chunk *c = list; c; c = c->next)
		bytes += c->len;
	pthread_mutex_lock(&d->mu);
	*d->qtail = list;
	d->qtail = tail;
	d->q_bytes += bytes;
	pthread_cond_signal(&d->cv);
	while (d->m && d->running && d->q_bytes > d->q_max)
		pthread_cond_wait(&d->room, &d->mu);
	pthread_mutex_unlock(&d->mu);
}

/*
 * The merge's frames waiting for their turn passed the cap: every one goes to the
 * writer now, in hostlist order, and later ones as they come. Rows keep their row ids
 * (node index, row number), so the table's order stays; only inserts stop being
 * appends. A host that fails after this has its rows dropped by the writer.
 */
static void spill(struct direct *d)
{
	struct chunk *list = NULL, **tail = &list;

	d->spilled = 1;
	d->held = 0;
	for (size_t h = d->next; h < d->n; h++) {
		struct host *hs = &d->hs[h];

		if (!hs->head)
			continue;
		hs->sent = !hs->done;
		hs->bytes = 0;
		*tail = hs->head;
		tail = hs->tail;
		hs->head = NULL;
		hs->tail = &hs->head;
	}
	if (list)
		send(d, list, tail);
}

int direct_frame(struct direct *d, size_t h, const void *frame, size_t len)
{
	struct chunk *c = malloc(sizeof(*c) + len);

	if (!c)
		return -ENOMEM;
	c->host = h;
	c->len = len;
	c->drop = 0;
	memcpy(c->data, frame, len);
	if (d->spilled) {
		c->next = NULL;
		d->hs[h].sent = 1;
		send(d, c, &c->next);
		return 0;
	}
	keep(&d->hs[h], c);
	if (d->m) {
		d->hs[h].bytes += len;
		d->held += len;
		if (d->held > d->held_max)
			spill(d);
	}
	return 0;
}

/* Closes the frame of relayed rows being built for host h and keeps it. */
static int close_frame(struct direct *d, size_t h)
{
	struct host *hs = &d->hs[h];
	int err;

	hs->open = 0;
	err = wire_rows_finish(&hs->w);
	if (!err && hs->b.len)
		err = direct_frame(d, h, hs->b.data, hs->b.len);
	wire_buf_reset(&hs->b);
	return err;
}

int direct_row(struct direct *d, size_t h, size_t ncols, const struct wire_value *vals)
{
	struct host *hs = &d->hs[h];
	int err;

	if (!hs->open) {
		err = wire_rows_begin(&hs->w, &hs->b, ncols);
		if (err)
			return err;
		hs->open = 1;
	}
	err = wire_rows_add(&hs->w, vals);
	if (!err && wire_rows_bytes(&hs->w) >= WIRE_ROWS_TARGET)
		err = close_frame(d, h);
	return err;
}

/* Hands the rows of the finished hosts at the head of the line to the writer. */
static void advance(struct direct *d)
{
	struct chunk *list = NULL, **tail = &list;

	while (d->next < d->n && d->hs[d->next].done) {
		struct host *hs = &d->hs[d->next++];

		d->held -= hs->bytes;
		hs->bytes = 0;
		if (hs->head) {
			*tail = hs->head;
			tail = hs->tail;
			hs->head = NULL;
			hs->tail = &hs->head;
		}
	}
	if (list)
		send(d, list, tail);
}

int direct_done(struct direct *d, size_t h, int keep_rows)
{
	struct host *hs = &d->hs[h];
	int err = 0;

	if (hs->done)
		return 0;
	hs->done = 1;
	if (hs->open)
		err = close_frame(d, h);
	wire_buf_release(&hs->b);
	if (!keep_rows || err) {
		free_chunks(hs->head);
		hs->head = NULL;
		hs->tail = &hs->head;
		d->held -= hs->bytes;
		hs->bytes = 0;
		/* rows the writer already has (the merge spilled): it drops them */
		if (hs->sent) {
			struct chunk *c = calloc(1, sizeof(*c));

			if (!c)
				return -ENOMEM;
			c->host = h;
			c->drop = 1;
			send(d, c, &c->next);
		}
	}
	advance(d);
	return err;
}

int direct_failed(struct direct *d)
{
	return __atomic_load_n(&d->err, __ATOMIC_ACQUIRE) != 0;
}

int direct_drain(struct direct *d, char **cause)
{
	struct chunk *rest;

	for (size_t h = d->next; h < d->n; h++)
		direct_done(d, h, 0);
	stop_writer(d, 0);
	/* Held, or no writer: the frames wait in the queue. */
	rest = d->q;
	d->q = NULL;
	d->qtail = &d->q;
	print_chunks(d, rest);
	if (d->err && cause) {
		*cause = d->cause;
		d->cause = NULL;
	}
	return d->err;
}

int direct_end(struct direct *d, const char *coverage_json)
{
	int err;

	if (!d->begun) {
		err = output_begin(d->out, 0, NULL);
		if (err)
			return err;
		d->begun = 1;
	}
	err = direct_drain(d, NULL);
	if (err)
		return err;
	return output_end(d->out, coverage_json);
}
