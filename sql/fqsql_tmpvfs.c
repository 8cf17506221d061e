/* SPDX-License-Identifier: MIT */
/*
 * Temporary files in memory for the read-only connections (docs/security.md "Limits").
 *
 * A sort, a transient table or a materialized subquery larger than SQLite's
 * cache goes to a temporary file, which by default lives in /var/tmp where no
 * memory budget sees it (a cross join ordered by a random blob wrote 1.6 GB).
 * PRAGMA temp_store = MEMORY kept it in memory, but it also turns off the
 * sorter's own arena: with temporary storage in memory, SQLite's sorter
 * allocates every record on its own, and each allocation then pays the
 * budget's accounting (fqsql_mem.c). A GROUP BY over a node's trace cost
 * 1.25-1.5 times the CPU it took before (BENCHMARKS.md, issue 15).
 *
 * So the connections keep temp_store = FILE and open through this VFS,
 * which keeps the files in memory instead: a file that SQLite opens without
 * a name (every temporary one) is a buffer grown with sqlite3_realloc64()
 * on the query's thread, charged to its budget like any other allocation,
 * and one that would pass it fails as SQLITE_IOERR_NOMEM. Named files (the
 * trace file, its WAL and shared memory) go to the default VFS untouched.
 */
#include <pthread.h>
#include <string.h>

#include "fqsql.h"

#define TMPVFS_NAME "fqsql-memtemp"
#define GROW_MIN (64 << 10)

struct memtemp {
	sqlite3_file base; /* first: SQLite passes a sqlite3_file * */
	unsigned char *data;
	sqlite3_int64 size; /* bytes written */
	sqlite3_int64 cap;  /* bytes allocated */
};

static sqlite3_vfs *real;
static sqlite3_vfs tmpvfs;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int registered; /* SQLITE_OK once registered */

static int mt_close(sqlite3_file *f)
{
	struct memtemp *t = (struct memtemp *)f;

	sqlite3_free(t->data);
	t->data = NULL;
	t->size = t->cap = 0;
	return SQLITE_OK;
}

static int mt_read(sqlite3_file *f, void *buf, int n, sqlite3_int64 off)
{
	struct memtemp *t = (struct memtemp *)f;
	sqlite3_int64 have = off < t->size ? t->size - off : 0;

	if (have >= n) {
		memcpy(buf, t->data + off, (size_t)n);
		return SQLITE_OK;
	}
	/* SQLite wants the rest zeroed on a short read */
	if (have > 0)
		memcpy(buf, t->data + off, (size_t)have);
	memset((char *)buf + have, 0, (size_t)(n - have));
	return SQLITE_IOERR_SHORT_READ;
}

/* Room for end bytes; grows by an eighth at least, so appends stay amortized. */
static int reserve(struct memtemp *t, sqlite3_int64 end)
{
	sqlite3_int64 cap;
	unsigned char *p;

	if (end <= t->cap)
		return SQLITE_OK;
	cap = t->cap + t->cap / 8;
	if (cap < end)
		cap = end;
	cap = (cap + GROW_MIN - 1) / GROW_MIN * GROW_MIN;
	p = sqlite3_realloc64(t->data, (sqlite3_uint64)cap);
	if (!p)
		return SQLITE_IOERR_NOMEM;
	t->data = p;
	t->cap = cap;
	return SQLITE_OK;
}

static int mt_write(sqlite3_file *f, const void *buf, int n, sqlite3_int64 off)
{
	struct memtemp *t = (struct memtemp *)f;
	int rc = reserve(t, off + n);

	if (rc)
		return rc;
	if (off > t->size)
		memset(t->data + t->size, 0, (size_t)(off - t->size));
	memcpy(t->data + off, buf, (size_t)n);
	if (off + n > t->size)
		t->size = off + n;
	return SQLITE_OK;
}

static int mt_truncate(sqlite3_file *f, sqlite3_int64 size)
{
	struct memtemp *t = (struct memtemp *)f;

	if (size == 0) {
		mt_close(f);
		return SQLITE_OK;
	}
	if (size > t->size) {
		int rc = reserve(t, size);

		if (rc)
			return rc;
		memset(t->data + t->size, 0, (size_t)(size - t->size));
	}
	t->size = size;
	return SQLITE_OK;
}

static int mt_sync(sqlite3_file *f, int flags)
{
	(void)f, (void)flags;
	return SQLITE_OK;
}

static int mt_file_size(sqlite3_file *f, sqlite3_int64 *size)
{
	*size = ((struct memtemp *)f)->size;
	return SQLITE_OK;
}

static int mt_lock(sqlite3_file *f, int level)
{
	(void)f, (void)level;
	return SQLITE_OK;
}

static int mt_reserved(sqlite3_file *f, int *out)
{
	(void)f;
	*out = 0;
	return SQLITE_OK;
}

static int mt_control(sqlite3_file *f, int op, void *arg)
{
	(void)f, (void)op, (void)arg;
	return SQLITE_NOTFOUND;
}

static int mt_sector_size(sqlite3_file *f)
{
	(void)f;
	return 4096;
}

static int mt_device(sqlite3_file *f)
{
	(void)f;
	return SQLITE_IOCAP_POWERSAFE_OVERWRITE;
}

/* Version 1: no shared memory, and no xFetch, so the sorter reads through xRead. */
static const sqlite3_io_methods memtemp_methods = {
	.iVersion = 1,
	.xClose = mt_close,
	.xRead = mt_read,
	.xWrite = mt_write,
	.xTruncate = mt_truncate,
	.xSync = mt_sync,
	.xFileSize = mt_file_size,
	.xLock = mt_lock,
	.xUnlock = mt_lock,
	.xCheckReservedLock = mt_reserved,
	.xFileControl = mt_control,
	.xSectorSize = mt_sector_size,
	.xDeviceCharacteristics = mt_device,
};

static int vfs_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out)
{
	struct memtemp *t = (struct memtemp *)f;

	(void)vfs;
	if (name)
		return real->xOpen(real, name, f, flags, out);
	memset(t, 0, sizeof(*t));
	t->base.pMethods = &memtemp_methods;
	if (out)
		*out = flags;
	return SQLITE_OK;
}

static int vfs_delete(sqlite3_vfs *vfs, const char *name, int sync_dir)
{
	(void)vfs;
	return real->xDelete(real, name, sync_dir);
}

static int vfs_access(sqlite3_vfs *vfs, const char *name, int flags, int *out)
{
	(void)vfs;
	return real->xAccess(real, name, flags, out);
}

static int vfs_full_pathname(sqlite3_vfs *vfs, const char *name, int n, char *out)
{
	(void)vfs;
	return real->xFullPathname(real, name, n, out);
}

static void *vfs_dlopen(sqlite3_vfs *vfs, const char *name)
{
	(void)vfs;
	return real->xDlOpen(real, name);
}

static void vfs_dlerror(sqlite3_vfs *vfs, int n, char *msg)
{
	(void)vfs;
	real->xDlError(real, n, msg);
}

static void (*vfs_dlsym(sqlite3_vfs *vfs, void *h, const char *sym))(void)
{
	(void)vfs;
	return real->xDlSym(real, h, sym);
}

static void vfs_dlclose(sqlite3_vfs *vfs, void *h)
{
	(void)vfs;
	real->xDlClose(real, h);
}

static int vfs_randomness(sqlite3_vfs *vfs, int n, char *out)
{
	(void)vfs;
	return real->xRandomness(real, n, out);
}

static int vfs_sleep(sqlite3_vfs *vfs, int us)
{
	(void)vfs;
	return real->xSleep(real, us);
}

static int vfs_current_time(sqlite3_vfs *vfs, double *out)
{
	(void)vfs;
	return real->xCurrentTime(real, out);
}

static int vfs_last_error(sqlite3_vfs *vfs, int n, char *msg)
{
	(void)vfs;
	return real->xGetLastError ? real->xGetLastError(real, n, msg) : 0;
}

static int vfs_current_time64(sqlite3_vfs *vfs, sqlite3_int64 *out)
{
	double d;
	int rc;

	(void)vfs;
	if (real->iVersion >= 2 && real->xCurrentTimeInt64)
		return real->xCurrentTimeInt64(real, out);
	rc = real->xCurrentTime(real, &d);
	*out = (sqlite3_int64)(d * 86400000.0);
	return rc;
}

static void vfs_register(void)
{
	real = sqlite3_vfs_find(NULL);
	if (!real) {
		registered = SQLITE_ERROR;
		return;
	}
	tmpvfs = (sqlite3_vfs){
		.iVersion = 2,
		.szOsFile = real->szOsFile > (int)sizeof(struct memtemp) ? real->szOsFile
									   : (int)sizeof(struct memtemp),
		.mxPathname = real->mxPathname,
		.zName = TMPVFS_NAME,
		.xOpen = vfs_open,
		.xDelete = vfs_delete,
		.xAccess = vfs_access,
		.xFullPathname = vfs_full_pathname,
		.xDlOpen = vfs_dlopen,
		.xDlError = vfs_dlerror,
		.xDlSym = vfs_dlsym,
		.xDlClose = vfs_dlclose,
		.xRandomness = vfs_randomness,
		.xSleep = vfs_sleep,
		.xCurrentTime = vfs_current_time,
		.xGetLastError = vfs_last_error,
		.xCurrentTimeInt64 = vfs_current_time64,
	};
	registered = sqlite3_vfs_register(&tmpvfs, 0);
}

const char *fqsql_tmpvfs(void)
{
	pthread_once(&once, vfs_register);
	return registered == SQLITE_OK ? TMPVFS_NAME : NULL;
}
