/* SPDX-License-Identifier: MIT */
/*
 * InfiniBand counter poller: walks sysfs each poll (devices and ports come
 * and go with driver reloads) and remembers each counter's last value in a
 * small open-addressing hash table keyed by (device, port, directory, name).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ib.h"

struct ib_counter {
	uint64_t hash;
	uint64_t value;
	int64_t port;
	uint32_t seen; /* poll number of the last sighting */
	const char *device, *name;
	char key[]; /* "dev/port/dir/name", then device and name NUL-terminated */
};

struct ib_poller {
	char *root; /* <sysfs_root>/sys/class/infiniband */
	struct ib_counter **tab;
	size_t cap, n;
	uint32_t poll;
	struct ib_poller_stats st;
};

static uint64_t fnv1a(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	while (*s)
		h = (h ^ (unsigned char)*s++) * 0x100000001b3ULL;
	return h;
}

static int tab_grow(struct ib_poller *p)
{
	size_t cap = p->cap ? p->cap * 2 : 256;
	struct ib_counter **tab = calloc(cap, sizeof(*tab));

	if (!tab)
		return -ENOMEM;
	for (size_t i = 0; i < p->cap; i++) {
		struct ib_counter *c = p->tab[i];
		size_t j;

		if (!c)
			continue;
		for (j = c->hash & (cap - 1); tab[j]; j = (j + 1) & (cap - 1))
			;
		tab[j] = c;
	}
	free(p->tab);
	p->tab = tab;
	p->cap = cap;
	return 0;
}

/* Finds or adds the counter; *fresh says it was added. NULL on ENOMEM. */
static struct ib_counter *tab_get(struct ib_poller *p, const char *dev, int64_t port,
				  const char *dir, const char *name, bool *fresh)
{
	char key[768];
	struct ib_counter *c;
	uint64_t h;
	size_t i, klen, dlen, nlen;

	*fresh = false;
	if (snprintf(key, sizeof(key), "%s/%lld/%s/%s", dev, (long long)port, dir, name) >=
	    (int)sizeof(key))
		return NULL;
	h = fnv1a(key);
	if (p->cap) {
		for (i = h & (p->cap - 1); (c = p->tab[i]); i = (i + 1) & (p->cap - 1))
			if (c->hash == h && !strcmp(c->key, key))
				return c;
	}
	if ((p->n + 1) * 2 > p->cap && tab_grow(p))
		return NULL;
	klen = strlen(key) + 1;
	dlen = strlen(dev) + 1;
	nlen = strlen(name) + 1;
	c = calloc(1, sizeof(*c) + klen + dlen + nlen);
	if (!c)
		return NULL;
	c->hash = h;
	c->port = port;
	memcpy(c->key, key, klen);
	c->device = memcpy(c->key + klen, dev, dlen);
	c->name = memcpy(c->key + klen + dlen, name, nlen);
	for (i = h & (p->cap - 1); p->tab[i]; i = (i + 1) & (p->cap - 1))
		;
	p->tab[i] = c;
	p->n++;
	p->st.counters = (int64_t)p->n;
	*fresh = true;
	return c;
}

/* One unsigned decimal integer (sysfs style, newline allowed). 0 or -errno. */
static int read_u64(int dirfd, const char *name, uint64_t *v)
{
	char buf[64], *end;
	ssize_t n;
	int fd;

	fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return n < 0 ? -errno : -EINVAL;
	buf[n] = '\0';
	if (buf[0] < '0' || buf[0] > '9')
		return -EINVAL;
	errno = 0;
	*v = strtoull(buf, &end, 10);
	if (errno || (*end && *end != '\n'))
		return -EINVAL;
	return 0;
}

static DIR *opendir_at(int dirfd, const char *name)
{
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d;

	if (fd < 0)
		return NULL;
	d = fdopendir(fd);
	if (!d)
		close(fd);
	return d;
}

struct poll_ctx {
	struct ib_poller *p;
	int64_t ts_ns;
	int (*emit)(void *arg, const struct rec_ib *r);
	void *arg;
	bool full;
	int rows;
};

static void poll_dir(struct poll_ctx *x, const char *dev, int64_t port, DIR *d, const char *dir)
{
	struct ib_poller *p = x->p;
	struct dirent *de;

	while ((de = readdir(d))) {
		struct ib_counter *c;
		struct rec_ib r;
		uint64_t v = 0;
		bool fresh;

		/* hw_counters/lifespan is a setting (ms the driver caches values), not a count */
		if (de->d_name[0] == '.' || de->d_type == DT_DIR || !strcmp(de->d_name, "lifespan"))
			continue;
		if (read_u64(dirfd(d), de->d_name, &v)) {
			p->st.unreadable++;
			continue;
		}
		c = tab_get(p, dev, port, dir, de->d_name, &fresh);
		if (!c)
			continue;
		r.ts_ns = x->ts_ns;
		r.device = c->device;
		r.port = c->port;
		r.counter = c->name;
		r.value = v > INT64_MAX ? INT64_MAX : (int64_t)v;
		if (fresh || c->seen + 1 < p->poll) {
			/* first sighting, or back after missing polls: no honest delta */
			r.delta = REC_NULL;
		} else if (v >= c->value) {
			r.delta = (int64_t)(v - c->value);
		} else {
			r.delta = r.value;
			p->st.resets++;
		}
		c->value = v;
		c->seen = p->poll;
		if (r.delta == 0 && !x->full)
			continue;
		x->emit(x->arg, &r);
		x->rows++;
	}
}

int ib_poller_poll(struct ib_poller *p, int64_t ts_ns,
		   int (*emit)(void *arg, const struct rec_ib *r), void *arg)
{
	struct poll_ctx x = { .p = p, .ts_ns = ts_ns, .emit = emit, .arg = arg };
	static const char *const dirs[] = { "counters", "hw_counters" };
	struct dirent *de, *pe;
	DIR *root, *ports, *cd;
	int dfd;

	root = opendir(p->root);
	if (!root)
		return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
	p->poll++;
	p->st.polls++;
	x.full = p->poll % IB_FULL_EVERY == 0;
	while ((de = readdir(root))) {
		if (de->d_name[0] == '.')
			continue;
		/* <dev>/ports: device entries are symlinks into /sys/devices */
		ports = NULL;
		dfd = openat(dirfd(root), de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0) {
			ports = opendir_at(dfd, "ports");
			close(dfd);
		}
		if (!ports)
			continue;
		while ((pe = readdir(ports))) {
			char *end;
			long port;
			int pfd;

			if (pe->d_name[0] == '.')
				continue;
			port = strtol(pe->d_name, &end, 10);
			if (*end)
				continue;
			pfd = openat(dirfd(ports), pe->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			if (pfd < 0)
				continue;
			for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
				cd = opendir_at(pfd, dirs[i]);
				if (!cd)
					continue;
				poll_dir(&x, de->d_name, port, cd, dirs[i]);
				closedir(cd);
			}
			close(pfd);
		}
		closedir(ports);
	}
	closedir(root);
	return x.rows;
}

struct ib_poller *ib_poller_new(const char *sysfs_root, char **cause)
{
	struct ib_poller *p;
	struct stat sb;

	if (!sysfs_root)
		sysfs_root = "/";
	if (stat(sysfs_root, &sb) || !S_ISDIR(sb.st_mode)) {
		int err = S_ISDIR(sb.st_mode) ? errno : ENOTDIR;

		if (cause && asprintf(cause,
				      "sysfs root '%s' is not a directory; point --sysfs-root at "
				      "the directory holding sys/class/infiniband",
				      sysfs_root) < 0)
			*cause = NULL;
		errno = err;
		return NULL;
	}
	p = calloc(1, sizeof(*p));
	if (!p || asprintf(&p->root, "%s/sys/class/infiniband", sysfs_root) < 0) {
		free(p);
		if (cause && asprintf(cause, "out of memory starting the infiniband poller") < 0)
			*cause = NULL;
		errno = ENOMEM;
		return NULL;
	}
	return p;
}

void ib_poller_get_stats(struct ib_poller *p, struct ib_poller_stats *st)
{
	*st = p->st;
}

void ib_poller_free(struct ib_poller *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->cap; i++)
		free(p->tab[i]);
	free(p->tab);
	free(p->root);
	free(p);
}
