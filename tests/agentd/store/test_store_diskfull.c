/* SPDX-License-Identifier: MIT */
/*
 * Disk full: the store on a 2 MiB tmpfs, a filler file taking the rest,
 * a flood of records. Commits fail and are counted, store_put keeps
 * returning (0 or -ENOBUFS); after the filler goes, writing resumes.
 * Needs root (mount); exits 77 (skipped) without it.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <unistd.h>

#include "store.h"
#include "store_test.h"

static char pad[200];

static struct rec record(int64_t i, int64_t pid)
{
	struct rec r = { .kind = REC_CUDA };

	r.u.cuda = (struct rec_cuda){ .ts_ns = i, .dur_ns = 1, .pid = pid, .tid = 1, .api = pad,
				      .kind = "launch", .bytes = i, .stream = 0, .ret = 0 };
	return r;
}

/* Writes until the file system is full; returns the bytes written. */
static long fill(const char *path)
{
	static char buf[4096];
	long total = 0;
	ssize_t n;
	int fd;

	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		DIE("cannot create %s: %s", path, strerror(errno));
	while ((n = write(fd, buf, sizeof(buf))) > 0)
		total += n;
	close(fd);
	return total;
}

int main(void)
{
	struct store_opts o = { .node = "n", .batch_rows = 256, .batch_ms = 5, .queue_rows = 1024 };
	char *dir = test_tmpdir(), path[512], filler[512], *cause = NULL;
	int64_t ok = 0, full = 0, resumed = 2000;
	struct store_stats st;
	struct store *s;
	sqlite3 *db;

	if (geteuid() != 0 || mount("fleetq-test", dir, "tmpfs", 0, "size=2m") != 0) {
		fprintf(stderr, "test_store_diskfull: skipped: cannot mount a tmpfs (needs root)\n");
		rmdir(dir);
		free(dir);
		return 77;
	}
	memset(pad, 'x', sizeof(pad) - 1);
	snprintf(path, sizeof(path), "%s/trace.db", dir);
	snprintf(filler, sizeof(filler), "%s/filler", dir);

	o.path = path;
	s = store_open(&o, &cause);
	if (!s)
		DIE("store_open: %s", cause);
	CHECK(fill(filler) > 0);

	/* ~8 MiB of records into a full 2 MiB file system */
	for (int64_t i = 0; i < 40000; i++) {
		struct rec r = record(i, 1);
		int rc = store_put(s, &r);

		if (rc == 0)
			ok++;
		else if (rc == -ENOBUFS)
			full++;
		else
			CHECK_EQ(rc, 0);
		if (i % 4096 == 0)
			store_flush(s);
	}
	store_flush(s);
	store_get_stats(s, &st);
	CHECK(st.write_errors > 0);
	CHECK(st.drops > 0);
	CHECK_EQ(st.queued, ok);
	CHECK_EQ(st.rows + st.drops, ok + full);
	fprintf(stderr, "while full: %lld committed, %lld dropped, %lld write errors\n",
		(long long)st.rows, (long long)st.drops, (long long)st.write_errors);

	/* space returns: writing resumes without intervention */
	if (unlink(filler))
		DIE("cannot remove %s", filler);
	for (int64_t i = 0; i < resumed; i++) {
		struct rec r = record(i, 777777);

		while (store_put(s, &r) == -ENOBUFS)
			usleep(1000);
	}
	CHECK_EQ(store_flush(s), 0);
	{
		struct store_stats after;

		store_get_stats(s, &after);
		CHECK_EQ(after.write_errors, st.write_errors);
		CHECK_EQ(after.rows, st.rows + resumed);
	}
	db = test_reader(path);
	CHECK_EQ(test_i64(db, "SELECT count(*) FROM cuda_calls WHERE pid = 777777"), resumed);
	sqlite3_close(db);
	store_close(s);

	if (umount2(dir, MNT_DETACH))
		fprintf(stderr, "cannot unmount %s: %s\n", dir, strerror(errno));
	rmdir(dir);
	free(dir);
	if (check_failures) {
		fprintf(stderr, "test_store_diskfull: %d failure(s)\n", check_failures);
		return 1;
	}
	printf("test_store_diskfull: ok\n");
	return 0;
}
