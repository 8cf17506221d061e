// SPDX-License-Identifier: MIT
/*
 * retx.so: preloaded into the stand-in's ranks by bench/accuracy/run. In the rank whose RANK
 * equals FQ_RETX_RANK it streams TCP over loopback to FQ_RETX_PORT, sender and receiver
 * both threads of the rank itself: the acknowledgements that trigger fast retransmits are
 * then processed in the rank's own process, so the tracer attributes the retransmits that
 * the bench's nftables rule provokes to the rank's pid. Bounded: 8 MB/s, until exit.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int port;
static int lfd = -1;

static void *receiver(void *arg __attribute__((unused)))
{
	static char buf[65536];
	int fd = accept(lfd, NULL, NULL);

	if (fd < 0)
		return NULL;
	while (read(fd, buf, sizeof(buf)) > 0)
		;
	close(fd);
	return NULL;
}

static void *sender(void *arg __attribute__((unused)))
{
	static char buf[8192];
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	struct timespec ms = { 0, 1000000 };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
		return NULL;
	for (;;) {
		if (write(fd, buf, sizeof(buf)) < 0)
			break;
		nanosleep(&ms, NULL);
	}
	close(fd);
	return NULL;
}

__attribute__((constructor)) static void retx_start(void)
{
	const char *want = getenv("FQ_RETX_RANK"), *rank = getenv("RANK"), *p = getenv("FQ_RETX_PORT");
	struct sockaddr_in sa = { .sin_family = AF_INET };
	pthread_t t;
	int one = 1;

	if (!want || !rank || !p || strcmp(want, rank))
		return;
	port = atoi(p);
	sa.sin_port = htons(port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (lfd < 0)
		return;
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd, 1))
		return;
	if (!pthread_create(&t, NULL, receiver, NULL))
		pthread_detach(t);
	if (!pthread_create(&t, NULL, sender, NULL))
		pthread_detach(t);
}
