// SPDX-License-Identifier: MIT
// cpuspeed: how fast each CPU of a machine runs the same work, interval by interval (an
// experiment beside fleetq, not part of it; for a virtual machine, whose vCPUs share host
// cores that the guest cannot see). One thread pinned to each CPU named runs a fixed
// integer loop in chunks; every INTERVAL_MS the main thread prints, per CPU, the chunks done
// since the last line. A CPU that finishes fewer chunks than the others in an interval ran
// the same instructions slower then.
// build: cc -O2 -pthread -o cpuspeed bench/gpu/cpuspeed.c (-static to carry it to a device)
// usage: cpuspeed SECONDS INTERVAL_MS CPU... ; prints "ms since start<TAB>cpu<TAB>chunks"
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define MAX_CPUS 1024

static _Atomic unsigned long counts[MAX_CPUS];
static atomic_int stop;
static unsigned long sink[MAX_CPUS];

static void *work(void *arg)
{
	long i = (long)arg;
	unsigned long x = (unsigned long)i + 1;

	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		for (int k = 0; k < 20000; k++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			x += (unsigned long)k;
			__asm__ volatile("" : "+r"(x)); // keep every step: the work is the point
		}
		atomic_fetch_add_explicit(&counts[i], 1, memory_order_relaxed);
	}
	sink[i] = x;
	return NULL;
}

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
	if (argc < 4 || argc - 3 > MAX_CPUS) {
		fprintf(stderr, "usage: cpuspeed SECONDS INTERVAL_MS CPU...\n");
		return 2;
	}
	double secs = atof(argv[1]), iv = atof(argv[2]);
	int n = argc - 3;
	static pthread_t th[MAX_CPUS];
	static int cpus[MAX_CPUS];
	static unsigned long last[MAX_CPUS];

	if (secs <= 0 || iv <= 0) {
		fprintf(stderr, "cpuspeed: SECONDS and INTERVAL_MS must be positive\n");
		return 2;
	}
	for (int i = 0; i < n; i++) {
		pthread_attr_t a;
		cpu_set_t s;

		cpus[i] = atoi(argv[3 + i]);
		if (cpus[i] < 0 || cpus[i] >= CPU_SETSIZE) {
			fprintf(stderr, "cpuspeed: no CPU %s\n", argv[3 + i]);
			return 2;
		}
		pthread_attr_init(&a);
		CPU_ZERO(&s);
		CPU_SET(cpus[i], &s);
		pthread_attr_setaffinity_np(&a, sizeof s, &s);
		if (pthread_create(&th[i], &a, work, (void *)(long)i) != 0) {
			fprintf(stderr, "cpuspeed: cannot start a thread on CPU %d\n", cpus[i]);
			return 1;
		}
		pthread_attr_destroy(&a);
	}
	double t0 = now_ms(), next = t0 + iv;
	while (now_ms() - t0 < secs * 1e3) {
		struct timespec ts = { 0, 1000000 };

		nanosleep(&ts, NULL);
		double t = now_ms();
		if (t < next)
			continue;
		for (int i = 0; i < n; i++) {
			unsigned long c = atomic_load(&counts[i]);

			printf("%.0f\t%d\t%lu\n", t - t0, cpus[i], c - last[i]);
			last[i] = c;
		}
		next += iv;
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	return 0;
}
