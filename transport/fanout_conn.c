/* SPDX-License-Identifier: MIT */
/*
 * One connection of the fan-out: resolving the node's name, the TCP connect and its
 * timeout, the TLS handshake with the node's name checked, reading whole frames, and
 * the words for a connection that failed or was lost.
 */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "clock.h"
#include "session.h"
#include "strbuf.h"
#include "wire.h"

#include "fanout_int.h"

static void try_connect(struct node *n);

static void read_cb(struct bufferevent *bev, void *arg);
static void event_cb(struct bufferevent *bev, short what, void *arg);

static void start_session(struct node *n)
{
	struct fanout *fo = n->fo;
	int one = 1;

	setsockopt(n->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* The agent builds its HELLO after our ClientHello: a bound for the clock sample. */
	if (!fo->p->insecure)
		n->t_lo = clock_ns(CLOCK_REALTIME);
	if (fo->p->insecure) {
		n->bev = bufferevent_socket_new(fo->base, n->fd, BEV_OPT_CLOSE_ON_FREE);
		n->state = N_HELLO;
	} else {
		X509_VERIFY_PARAM *vp;

		n->ssl = SSL_new(fo->ctx);
		if (!n->ssl) {
			node_finish(n, WIRE_OUT_TLS, "cannot create TLS session: %s", ssl_reason());
			return;
		}
		/* Resume the last session with this host and port when there is one:
		 * the agent's certificate was verified, against this name and our
		 * CAs, when that session was made. */
		session_offer(n->ssl, n->skey);
		/* Verify the agent's certificate against the name we dialled. */
		vp = SSL_get0_param(n->ssl);
		if (n->is_ip) {
			X509_VERIFY_PARAM_set1_ip_asc(vp, n->host);
		} else {
			X509_VERIFY_PARAM_set_hostflags(vp, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
			X509_VERIFY_PARAM_set1_host(vp, n->host, 0);
			SSL_set_tlsext_host_name(n->ssl, n->host);
		}
		n->bev = bufferevent_openssl_socket_new(
			fo->base, n->fd, n->ssl, BUFFEREVENT_SSL_CONNECTING, BEV_OPT_CLOSE_ON_FREE);
		/* On failure libevent may already have freed the SSL (CLOSE_ON_FREE):
		 * leaking it on this out-of-memory path beats a double free. */
		n->state = N_HANDSHAKE;
	}
	if (!n->bev) {
		n->ssl = NULL;
		node_finish(n, WIRE_OUT_UNREACHABLE, "cannot set up the connection");
		return;
	}
	bufferevent_setcb(n->bev, read_cb, NULL, event_cb, n);
	bufferevent_enable(n->bev, EV_READ | EV_WRITE);
}

static void connect_cb(evutil_socket_t fd, short what, void *arg)
{
	struct node *n = arg;
	int err = 0;
	socklen_t len = sizeof(err);

	n->connect_set = 0;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	if (err) {
		node_error_text(n, "connect", err);
		close(n->fd);
		n->fd = -1;
		n->ai_next = n->ai_next->ai_next;
		try_connect(n);
		return;
	}
	start_session(n);
}

static void try_connect(struct node *n)
{
	struct fanout *fo = n->fo;

	for (; n->ai_next; n->ai_next = n->ai_next->ai_next) {
		struct evutil_addrinfo *a = n->ai_next;

		n->fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (n->fd < 0) {
			node_error_text(n, "socket", errno);
			continue;
		}
		/* A plaintext agent sends HELLO once it accepts: after this. */
		n->t_lo = clock_ns(CLOCK_REALTIME);
		if (connect(n->fd, a->ai_addr, a->ai_addrlen) == 0 || errno == EINPROGRESS) {
			event_assign(&n->ev_connect, fo->base, n->fd, EV_WRITE, connect_cb, n);
			event_add(&n->ev_connect, NULL);
			n->connect_set = 1;
			n->state = N_CONNECTING;
			return;
		}
		node_error_text(n, "connect", errno);
		close(n->fd);
		n->fd = -1;
	}
	node_finish(n, WIRE_OUT_UNREACHABLE, "%s", n->last_error ? n->last_error : "no address");
}

static void dns_cb(int result, struct evutil_addrinfo *res, void *arg)
{
	struct node *n = arg;

	if (result == EVUTIL_EAI_CANCEL)
		return;
	n->dns = NULL;
	if (result) {
		node_finish(n, WIRE_OUT_UNREACHABLE, "cannot resolve '%s': %s", n->host,
			    evutil_gai_strerror(result));
		return;
	}
	n->ai = n->ai_next = res;
	try_connect(n);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct node *n = arg;
	double secs = n->fo->p->connect_timeout_ms / 1000.0;

	n->timer_set = 0;
	switch (n->state) {
	case N_RESOLVING:
		node_finish(n, WIRE_OUT_UNREACHABLE, "cannot resolve '%s' within %gs", n->host, secs);
		break;
	case N_CONNECTING:
		node_finish(n, WIRE_OUT_UNREACHABLE, "connect timed out after %gs", secs);
		break;
	case N_HANDSHAKE:
		node_finish(n, WIRE_OUT_TIMEOUT, "TLS handshake not done within %gs", secs);
		break;
	default:
		/* A TLS agent waits for our ClientHello as we wait for its HELLO. */
		node_finish(n, WIRE_OUT_TIMEOUT,
			    n->fo->p->insecure ? "no HELLO within %gs (does the agent serve TLS? "
						 "then drop --insecure)"
					       : "no HELLO within %gs",
			    secs);
		break;
	}
}

void node_start(struct node *n)
{
	struct fanout *fo = n->fo;
	struct evutil_addrinfo hints = { 0 };
	struct timeval tv = ms_tv(fo->p->connect_timeout_ms);
	char port[8];

	fo->inflight++;
	n->state = N_RESOLVING;
	evtimer_assign(&n->ev_timer, fo->base, timer_cb, n);
	evtimer_add(&n->ev_timer, &tv);
	n->timer_set = 1;
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_protocol = IPPROTO_TCP;
	/* An address is no name: ADDRCONFIG would refuse ::1 on a host without a
	 * routable IPv6 address, as libevent checks for one. */
	hints.ai_flags = n->is_ip ? EVUTIL_AI_NUMERICHOST : EVUTIL_AI_ADDRCONFIG;
	snprintf(port, sizeof(port), "%d", n->port);
	/* The callback may run before this returns (numeric hosts). */
	n->dns = evdns_getaddrinfo(fo->dns, n->host, port, &hints, dns_cb, n);
	if (n->state != N_RESOLVING)
		n->dns = NULL;
}

static void read_cb(struct bufferevent *bev, void *arg)
{
	struct node *n = arg;
	struct evbuffer *in = bufferevent_get_input(bev);

	for (;;) {
		size_t avail = evbuffer_get_length(in), flen;
		unsigned char hdr[WIRE_HDR_LEN];
		uint32_t plen;
		unsigned char *p;

		if (avail < WIRE_HDR_LEN)
			return;
		evbuffer_copyout(in, hdr, WIRE_HDR_LEN);
		plen = (uint32_t)hdr[0] << 24 | hdr[1] << 16 | hdr[2] << 8 | hdr[3];
		if (plen > WIRE_FRAME_MAX) {
			node_finish(n, WIRE_OUT_PROTOCOL,
				    "frame of %" PRIu32 " bytes exceeds the %u limit", plen,
				    WIRE_FRAME_MAX);
			return;
		}
		flen = WIRE_HDR_LEN + (size_t)plen;
		if (avail < flen)
			return;
		p = evbuffer_pullup(in, flen);
		if (!p) {
			set_fatal(n->fo, NULL);
			return;
		}
		if (on_frame(n, p, flen))
			return;
		evbuffer_drain(in, flen);
	}
}

/* Why a TLS connection failed, in words. */
static void tls_why(struct node *n, char *buf, size_t len)
{
	unsigned long e = 0, x;
	long vr;

	while ((x = bufferevent_get_openssl_error(n->bev)))
		e = x;
	vr = n->ssl ? SSL_get_verify_result(n->ssl) : X509_V_OK;
	if (vr != X509_V_OK)
		snprintf(buf, len, "agent certificate not accepted: %s",
			 X509_verify_cert_error_string(vr));
	else if (e && ERR_GET_LIB(e) != ERR_LIB_SYS && ERR_reason_error_string(e))
		snprintf(buf, len, "%s", ERR_reason_error_string(e));
	else if (e) /* libevent's SSL_ERROR_SYSCALL, or a reset: the agent closed on us */
		snprintf(buf, len, "agent closed the connection (busy, or limiting this address: "
			 "see its log)");
	else if (EVUTIL_SOCKET_ERROR())
		snprintf(buf, len, "%s", strerror(EVUTIL_SOCKET_ERROR()));
	else
		snprintf(buf, len, "connection closed");
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct node *n = arg;
	char why[256];

	if (what & BEV_EVENT_CONNECTED) {
		n->state = N_HELLO;
		return;
	}
	if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
		return;
	/* Frames that arrived with the close (an ERROR before it) come first. */
	read_cb(bev, n);
	if (n->state == N_DONE || n->fo->fatal)
		return;
	if (n->fo->p->insecure) {
		snprintf(why, sizeof(why), "%s",
			 (what & BEV_EVENT_ERROR) && EVUTIL_SOCKET_ERROR()
				 ? strerror(EVUTIL_SOCKET_ERROR())
				 : "connection closed");
	} else {
		tls_why(n, why, sizeof(why));
	}
	switch (n->state) {
	case N_HANDSHAKE:
		node_finish(n, WIRE_OUT_TLS, "handshake failed: %s", why);
		break;
	case N_HELLO:
		/* Under TLS 1.3 a refused client finishes its handshake; the
		 * refusal shows up as a close before HELLO. */
		if (n->fo->p->insecure)
			node_finish(n, WIRE_OUT_PROTOCOL, "closed before HELLO: %s", why);
		else
			node_finish(n, WIRE_OUT_TLS,
				    "closed before HELLO (agent refused our certificate?): %s",
				    why);
		break;
	case N_PING:
		node_finish(n, WIRE_OUT_PARTIAL, "connection lost while sampling the clock: %s", why);
		break;
	default:
		node_finish(n, WIRE_OUT_PARTIAL,
			    "connection lost after %" PRId64 " rows, rows dropped: %s", n->rows,
			    why);
	}
}
