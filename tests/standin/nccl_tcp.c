/* SPDX-License-Identifier: MIT */
/*
 * The stand-in libnccl's TCP transport: a test double that makes a collective's completion
 * depend on a real network, so that a lossy link (packets dropped in one rank's network
 * namespace) slows the job the way it slows NCCL's socket transport, with real TCP
 * retransmits for the tracer to see. See nccl_tcp.h and tests/standin/README.md.
 *
 * Each rank listens on its own address, connects to the next rank and accepts the previous
 * one: one socket each way round the ring. An all-reduce of N elements over R ranks cuts the
 * buffer into R chunks and takes 2(R-1) steps (reduce-scatter, then all-gather); in every step
 * a rank sends one chunk to the next rank while it receives one from the previous, both
 * non-blocking under one poll so that no rank waits on a full socket buffer.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "nccl_tcp.h"
#include "standin.h"

struct fqsi_tcp {
	int rank, nranks;
	int next; /* to rank + 1 */
	int prev; /* from rank - 1 */
	void *tmp;
	size_t tmp_len;
};

/* Every message starts with this: the collective and its step, and the bytes that follow. */
struct hdr {
	uint64_t seq;
	uint32_t step;
	uint32_t len;
};

static int say(char **cause, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int say(char **cause, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (vasprintf(cause, fmt, ap) < 0)
		*cause = NULL;
	va_end(ap);
	return err;
}

/* The n-th "ip:port" of FQ_STANDIN_TCP_ADDRS into a; -EINVAL if malformed or missing. */
static int addr_of(const char *list, int n, struct sockaddr_in *a, char *text, size_t len)
{
	const char *p = list, *e, *colon;
	char buf[64];
	long port;
	char *end;

	for (int i = 0; i < n && p; i++) {
		p = strchr(p, ',');
		if (p)
			p++;
	}
	if (!p || !*p)
		return -EINVAL;
	e = strchr(p, ',');
	if (!e)
		e = p + strlen(p);
	if ((size_t)(e - p) >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, p, (size_t)(e - p));
	buf[e - p] = '\0';
	colon = strrchr(buf, ':');
	if (!colon)
		return -EINVAL;
	buf[colon - buf] = '\0';
	errno = 0;
	port = strtol(colon + 1, &end, 10);
	if (errno || end == colon + 1 || *end || port < 1 || port > 65535)
		return -EINVAL;
	memset(a, 0, sizeof(*a));
	a->sin_family = AF_INET;
	a->sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, buf, &a->sin_addr) != 1)
		return -EINVAL;
	snprintf(text, len, "%s:%ld", buf, port);
	return 0;
}

static int count_addrs(const char *list)
{
	int n = 1;

	for (const char *p = list; *p; p++)
		n += *p == ',';
	return n;
}

static int poll_until(struct pollfd *p, nfds_t n, uint64_t deadline_ns)
{
	uint64_t now = fqsi_now_ns();
	int r;

	if (now >= deadline_ns)
		return -ETIMEDOUT;
	r = poll(p, n, (int)((deadline_ns - now) / 1000000 + 1));
	if (r < 0)
		return errno == EINTR ? 0 : -errno;
	return r == 0 ? -ETIMEDOUT : 0;
}

static int connect_next(struct fqsi_tcp *t, const struct sockaddr_in *a, const char *text,
			uint64_t deadline_ns, char **cause)
{
	int32_t me = t->rank;

	for (;;) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), e;
		uint64_t now = fqsi_now_ns(), left = deadline_ns > now ? deadline_ns - now : 1000;
		struct timeval tv = { (time_t)(left / 1000000000u),
				      (suseconds_t)(left % 1000000000u / 1000) };

		if (fd < 0)
			return say(cause, -errno, "cannot create a socket: %s", strerror(errno));
		/* a peer whose link eats the SYNs: connect gives up at the deadline */
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		if (!connect(fd, (const struct sockaddr *)a, sizeof(*a))) {
			/* who is calling: the acceptor checks it is its previous rank */
			if (write(fd, &me, sizeof(me)) != sizeof(me)) {
				e = errno;
				close(fd);
				return say(cause, -e, "cannot greet rank %d at %s: %s",
					   (t->rank + 1) % t->nranks, text, strerror(e));
			}
			t->next = fd;
			return 0;
		}
		e = errno;
		close(fd);
		/* the next rank may not listen yet: it joined the communicator a moment ago */
		if ((e != ECONNREFUSED && e != ENETUNREACH && e != EHOSTUNREACH) ||
		    fqsi_now_ns() >= deadline_ns)
			return say(cause, -e, "cannot connect to rank %d at %s: %s",
				   (t->rank + 1) % t->nranks, text, strerror(e));
		fqsi_sleep_until(fqsi_now_ns() + 10000000);
	}
}

static int accept_prev(struct fqsi_tcp *t, int l, uint64_t deadline_ns, char **cause)
{
	int want = (t->rank + t->nranks - 1) % t->nranks, err;
	struct pollfd p = { .fd = l, .events = POLLIN };
	int32_t who = -1;
	int fd;

	for (;;) {
		err = poll_until(&p, 1, deadline_ns);
		if (err)
			return say(cause, err, "rank %d never connected: %s", want, strerror(-err));
		fd = accept4(l, NULL, NULL, SOCK_CLOEXEC);
		if (fd >= 0)
			break;
		if (errno != EINTR && errno != EAGAIN)
			return say(cause, -errno, "cannot accept rank %d: %s", want,
				   strerror(errno));
	}
	if (read(fd, &who, sizeof(who)) != sizeof(who) || who != want) {
		close(fd);
		return say(cause, -EPROTO, "expected rank %d to connect, got rank %d", want,
			   (int)who);
	}
	t->prev = fd;
	return 0;
}

int fqsi_tcp_open(int rank, int nranks, uint64_t deadline_ns, struct fqsi_tcp **out,
		  char **cause)
{
	const char *tr = getenv("FQ_STANDIN_TRANSPORT"), *list = getenv("FQ_STANDIN_TCP_ADDRS");
	struct sockaddr_in me, nx;
	char met[80], nxt[80];
	struct fqsi_tcp *t = NULL;
	int l = -1, one = 1, err;

	*out = NULL;
	if (!tr || !strcmp(tr, "shm"))
		return 0;
	if (strcmp(tr, "tcp"))
		return say(cause, -EINVAL, "FQ_STANDIN_TRANSPORT is '%s', want shm or tcp", tr);
	if (!list || !*list)
		return say(cause, -EINVAL, "FQ_STANDIN_TRANSPORT=tcp needs FQ_STANDIN_TCP_ADDRS");
	/* ncclCommInitRank's communicators (the world); split ones keep shared memory */
	if (nranks < 2)
		return 0;
	if (count_addrs(list) != nranks)
		return say(cause, -EINVAL, "FQ_STANDIN_TCP_ADDRS has %d addresses for %d ranks",
			   count_addrs(list), nranks);
	if (addr_of(list, rank, &me, met, sizeof(met)) ||
	    addr_of(list, (rank + 1) % nranks, &nx, nxt, sizeof(nxt)))
		return say(cause, -EINVAL, "bad FQ_STANDIN_TCP_ADDRS '%s' (want ip:port,...)",
			   list);
	t = calloc(1, sizeof(*t));
	if (!t)
		return say(cause, -ENOMEM, "out of memory");
	t->rank = rank;
	t->nranks = nranks;
	t->next = t->prev = -1;
	l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(l, (struct sockaddr *)&me, sizeof(me)) || listen(l, 4)) {
		err = say(cause, -errno, "cannot listen on %s: %s", met, strerror(errno));
		goto fail;
	}
	err = connect_next(t, &nx, nxt, deadline_ns, cause);
	if (err)
		goto fail;
	err = accept_prev(t, l, deadline_ns, cause);
	if (err)
		goto fail;
	for (int i = 0; i < 2; i++) {
		int fd = i ? t->prev : t->next;

		/* a collective's last segment goes out at once, as NCCL's sockets do */
		if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) ||
		    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)) {
			err = say(cause, -errno, "cannot set up the ring's sockets: %s",
				  strerror(errno));
			goto fail;
		}
	}
	close(l);
	*out = t;
	return 0;
fail:
	if (l >= 0)
		close(l);
	fqsi_tcp_close(t);
	return err;
}

/* Sends sl bytes to the next rank while it receives rl from the previous one. */
static int xchg(struct fqsi_tcp *t, uint64_t seq, uint32_t step, const void *sb, size_t sl,
		void *rb, size_t rl, uint64_t deadline_ns, char **cause)
{
	struct hdr sh = { seq, step, (uint32_t)sl }, rh;
	size_t so = 0, ro = 0, stot = sizeof(sh) + sl, rtot = sizeof(rh) + rl;

	while (so < stot || ro < rtot) {
		struct pollfd p[2] = { { .fd = so < stot ? t->next : -1, .events = POLLOUT },
				       { .fd = ro < rtot ? t->prev : -1, .events = POLLIN } };
		int err = poll_until(p, 2, deadline_ns);
		ssize_t n;

		if (err)
			return say(cause, err, "step %u of seq %llu: %s (sent %zu of %zu bytes to "
				   "rank %d, received %zu of %zu from rank %d)", step,
				   (unsigned long long)seq, strerror(-err), so, stot,
				   (t->rank + 1) % t->nranks, ro, rtot,
				   (t->rank + t->nranks - 1) % t->nranks);
		if (so < stot && (p[0].revents & (POLLOUT | POLLERR | POLLHUP))) {
			n = so < sizeof(sh)
				    ? send(t->next, (char *)&sh + so, sizeof(sh) - so, MSG_NOSIGNAL)
				    : send(t->next, (const char *)sb + (so - sizeof(sh)),
					   stot - so, MSG_NOSIGNAL);
			if (n < 0 && errno != EAGAIN && errno != EINTR)
				return say(cause, -errno, "cannot send to rank %d: %s",
					   (t->rank + 1) % t->nranks, strerror(errno));
			so += n > 0 ? (size_t)n : 0;
		}
		if (ro < rtot && (p[1].revents & (POLLIN | POLLERR | POLLHUP))) {
			n = ro < sizeof(rh) ? recv(t->prev, (char *)&rh + ro, sizeof(rh) - ro, 0)
					    : recv(t->prev, (char *)rb + (ro - sizeof(rh)),
						   rtot - ro, 0);
			if (n == 0)
				return say(cause, -ECONNRESET, "rank %d closed the ring",
					   (t->rank + t->nranks - 1) % t->nranks);
			if (n < 0 && errno != EAGAIN && errno != EINTR)
				return say(cause, -errno, "cannot receive from rank %d: %s",
					   (t->rank + t->nranks - 1) % t->nranks, strerror(errno));
			ro += n > 0 ? (size_t)n : 0;
			if (ro == sizeof(rh) && n > 0 &&
			    (rh.seq != seq || rh.step != step || rh.len != rl))
				return say(cause, -EPROTO,
					   "rank %d sent seq %llu step %u (%u bytes), "
					   "want seq %llu step %u (%zu)",
					   (t->rank + t->nranks - 1) % t->nranks,
					   (unsigned long long)rh.seq, rh.step, rh.len,
					   (unsigned long long)seq, step, rl);
		}
	}
	return 0;
}

int fqsi_tcp_allreduce(struct fqsi_tcp *t, const void *send, void *recv, size_t count,
		       size_t esize, int sum, uint64_t seq, uint64_t deadline_ns, char **cause)
{
	int n = t->nranks, r = t->rank;
	char *buf = recv;
	uint32_t step = 0;
	int err;

/* chunk c of the buffer: [off(c), off(c + 1)) elements */
#define OFF(c) ((size_t)(c) * count / (size_t)n)
#define LEN(c) (OFF((c) + 1) - OFF(c))
	if (send != recv)
		memmove(recv, send, count * esize);
	if ((count / (size_t)n + 1) * esize > t->tmp_len) {
		void *p = realloc(t->tmp, (count / (size_t)n + 1) * esize);

		if (!p)
			return say(cause, -ENOMEM, "out of memory");
		t->tmp = p;
		t->tmp_len = (count / (size_t)n + 1) * esize;
	}
	/* reduce-scatter: after it, chunk (r + 1) % n holds every rank's sum */
	for (int s = 0; s < n - 1; s++, step++) {
		int sc = (r - s + n) % n, rc = (r - s - 1 + 2 * n) % n;

		err = xchg(t, seq, step, buf + OFF(sc) * esize, LEN(sc) * esize, t->tmp,
			   LEN(rc) * esize, deadline_ns, cause);
		if (err)
			return err;
		if (sum && esize == sizeof(float)) {
			float *d = (float *)(void *)(buf + OFF(rc) * esize);
			const float *x = t->tmp;

			for (size_t i = 0; i < LEN(rc); i++)
				d[i] += x[i];
		}
	}
	/* all-gather: pass the summed chunks round the ring */
	for (int s = 0; s < n - 1; s++, step++) {
		int sc = (r + 1 - s + n) % n, rc = (r - s + n) % n;

		err = xchg(t, seq, step, buf + OFF(sc) * esize, LEN(sc) * esize,
			   buf + OFF(rc) * esize, LEN(rc) * esize, deadline_ns, cause);
		if (err)
			return err;
	}
#undef OFF
#undef LEN
	return 0;
}

void fqsi_tcp_close(struct fqsi_tcp *t)
{
	if (!t)
		return;
	if (t->next >= 0)
		close(t->next);
	if (t->prev >= 0)
		close(t->prev);
	free(t->tmp);
	free(t);
}
