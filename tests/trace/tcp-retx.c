/* SPDX-License-Identifier: MIT */
/*
 * tcp-retx 'COMMAND': makes a loopback TCP connection, runs COMMAND with the server's
 * port in $FQ_PORT (a firewall rule that drops it), sends, and waits 2 s so the kernel
 * retransmits a few times; prints the port. Bounded: one connection, 2 seconds.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t al = sizeof(a);
	char pbuf[16], buf[4096];
	int l, c, s, port;

	if (argc != 2) {
		fprintf(stderr, "usage: tcp-retx 'COMMAND using $FQ_PORT'\n");
		return 2;
	}
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	l = socket(AF_INET, SOCK_STREAM, 0);
	c = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || c < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 1) ||
	    getsockname(l, (struct sockaddr *)&a, &al) ||
	    connect(c, (struct sockaddr *)&a, sizeof(a)) || (s = accept(l, NULL, NULL)) < 0) {
		perror("tcp-retx: loopback connection");
		return 1;
	}
	port = ntohs(a.sin_port);
	snprintf(pbuf, sizeof(pbuf), "%d", port);
	setenv("FQ_PORT", pbuf, 1);
	if (system(argv[1])) {
		fprintf(stderr, "tcp-retx: '%s' failed\n", argv[1]);
		return 1;
	}
	memset(buf, 'x', sizeof(buf));
	if (write(c, buf, sizeof(buf)) < 0) {
		perror("tcp-retx: write");
		return 1;
	}
	sleep(2);
	printf("%d\n", port);
	close(s);
	close(c);
	close(l);
	return 0;
}
