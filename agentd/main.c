/* SPDX-License-Identifier: MIT */
/*
 * agentd: traces the GPU workload on this node into a SQLite file and serves
 * read-only SQL on it over mutual TLS. See docs/agentd.8.
 */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <limits.h>
#include <linux/capability.h>
#include <malloc.h>
#include <linux/securebits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <event2/thread.h>

#include "../sql/fqsql.h"
#include "../wire/wire.h"
#include "log.h"
#include "server.h"
#include "tls.h"
#ifdef FLEETQ_HAVE_TRACE
#include "trace.h"
#endif

#define MAX_ALLOW 64
#define RETAIN_BYTES_MIN (1 << 20)

static const char usage_text[] =
	"usage: agentd --listen ADDR:PORT --db FILE --ca FILE --cert FILE --key FILE [options]\n"
	"\n"
	"  --listen ADDR:PORT     address to serve on (port 0: any free port)\n"
	"  --db FILE              trace database (written by the tracer, read by queries)\n"
	"  --ca FILE              CA certificate that client certificates must chain to\n"
	"  --cert FILE            this node's certificate (PEM, chain allowed)\n"
	"  --key FILE             this node's private key (PEM)\n"
	"  --allow-client PATTERN only clients whose CN or DNS name matches (fnmatch; repeatable)\n"
	"  --insecure             serve plaintext without --ca/--cert/--key (loopback only)\n"
	"  --node NAME            node name reported to clients (default: host name)\n"
	"  --no-trace             do not trace; serve an existing --db\n"
	"  --cgroup PATH          trace only processes in this cgroup v2 path\n"
	"  --probes LIST          comma-separated probe set (default: all)\n"
	"  --sysfs-root DIR       where to find sys/class/infiniband (default: /)\n"
	"  --ib-interval SEC      InfiniBand counter poll period, 0 disables (default: 1)\n"
	"  --gpu-interval SEC     NVML GPU sample period (decimals allowed), 0 disables\n"
	"                         (default: 1)\n"
	"  --nvml-lib PATH        NVML library to load (default: libnvidia-ml.so.1)\n"
	"  --retain-bytes N       past this file size, delete the oldest trace rows;\n"
	"                         0: no bound (default: 4294967296, 4 GiB)\n"
	"  --retain-age SEC       delete trace rows older than this; 0: no bound\n"
	"                         (default: 604800, 7 days)\n"
	"  --max-rows N           most rows one query may return (default: 1000000)\n"
	"  --max-bytes N          most result bytes one query may return (default: 268435456)\n"
	"  --timeout-ms N         longest a query may run (default: 30000)\n"
	"  --max-queries N        queries running at once (default: 8)\n"
	"  --query-mem MIB        SQLite memory one query may use, sorts and temp tables\n"
	"                         included (default: 64)\n"
	"  --query-mem-total MIB  SQLite memory all running queries may use together\n"
	"                         (default: 128)\n"
	"  --idle-timeout SEC     close sessions idle this long (default: 60)\n"
	"  --handshake-timeout SEC  close sessions whose TLS handshake takes longer (default: 5)\n"
	"  --max-handshakes N     TLS handshakes at once; past it the oldest is closed\n"
	"                         (default: 64)\n"
	"  --max-conns N          sessions open at once; more are refused (default: 256)\n"
	"  --max-conns-per-source N  connections from one address (IPv6: one /64);\n"
	"                         more are closed at once (default: 64)\n"
	"  --frame-mem MIB        memory all sessions' frames over 64 KiB may hold\n"
	"                         together; past it such a frame is refused (default: 64)\n"
	"  --relay-max-dial N     peers a relay dials itself for one query; more go\n"
	"                         through sub-relays (default: 64)\n"
	"  --relay-peer PATTERN   a relay dials only hosts matching (fnmatch; repeatable;\n"
	"                         default: any)\n"
	"  --user NAME            with --no-trace: switch to this user once listening\n"
	"  --drain-timeout SEC    on SIGTERM, how long running queries may finish (default: 10)\n"
	"  --port-file FILE       write the bound port here once listening\n"
	"  --log FILE             log here instead of stderr\n"
	"  -h, --help             show this help\n"
	"  --version              show the version\n";

enum {
	OPT_LISTEN = 256,
	OPT_DB,
	OPT_CA,
	OPT_CERT,
	OPT_KEY,
	OPT_ALLOW,
	OPT_INSECURE,
	OPT_NODE,
	OPT_NO_TRACE,
	OPT_CGROUP,
	OPT_PROBES,
	OPT_SYSFS,
	OPT_IB,
	OPT_GPU,
	OPT_NVML_LIB,
	OPT_RETAIN_BYTES,
	OPT_RETAIN_AGE,
	OPT_MAX_ROWS,
	OPT_MAX_BYTES,
	OPT_TIMEOUT,
	OPT_MAX_QUERIES,
	OPT_QUERY_MEM,
	OPT_QUERY_MEM_TOTAL,
	OPT_IDLE,
	OPT_HANDSHAKE,
	OPT_MAX_CONNS,
	OPT_MAX_HANDSHAKES,
	OPT_MAX_PER_SOURCE,
	OPT_FRAME_MEM,
	OPT_USER,
	OPT_RELAY_MAX_DIAL,
	OPT_RELAY_PEER,
	OPT_DRAIN,
	OPT_PORT_FILE,
	OPT_LOG,
	OPT_VERSION,
};

static const struct option longopts[] = {
	{ "listen", required_argument, NULL, OPT_LISTEN },
	{ "db", required_argument, NULL, OPT_DB },
	{ "ca", required_argument, NULL, OPT_CA },
	{ "cert", required_argument, NULL, OPT_CERT },
	{ "key", required_argument, NULL, OPT_KEY },
	{ "allow-client", required_argument, NULL, OPT_ALLOW },
	{ "insecure", no_argument, NULL, OPT_INSECURE },
	{ "node", required_argument, NULL, OPT_NODE },
	{ "no-trace", no_argument, NULL, OPT_NO_TRACE },
	{ "cgroup", required_argument, NULL, OPT_CGROUP },
	{ "probes", required_argument, NULL, OPT_PROBES },
	{ "sysfs-root", required_argument, NULL, OPT_SYSFS },
	{ "ib-interval", required_argument, NULL, OPT_IB },
	{ "gpu-interval", required_argument, NULL, OPT_GPU },
	{ "nvml-lib", required_argument, NULL, OPT_NVML_LIB },
	{ "retain-bytes", required_argument, NULL, OPT_RETAIN_BYTES },
	{ "retain-age", required_argument, NULL, OPT_RETAIN_AGE },
	{ "max-rows", required_argument, NULL, OPT_MAX_ROWS },
	{ "max-bytes", required_argument, NULL, OPT_MAX_BYTES },
	{ "timeout-ms", required_argument, NULL, OPT_TIMEOUT },
	{ "max-queries", required_argument, NULL, OPT_MAX_QUERIES },
	{ "query-mem", required_argument, NULL, OPT_QUERY_MEM },
	{ "query-mem-total", required_argument, NULL, OPT_QUERY_MEM_TOTAL },
	{ "idle-timeout", required_argument, NULL, OPT_IDLE },
	{ "handshake-timeout", required_argument, NULL, OPT_HANDSHAKE },
	{ "max-conns", required_argument, NULL, OPT_MAX_CONNS },
	{ "max-handshakes", required_argument, NULL, OPT_MAX_HANDSHAKES },
	{ "max-conns-per-source", required_argument, NULL, OPT_MAX_PER_SOURCE },
	{ "frame-mem", required_argument, NULL, OPT_FRAME_MEM },
	{ "user", required_argument, NULL, OPT_USER },
	{ "relay-max-dial", required_argument, NULL, OPT_RELAY_MAX_DIAL },
	{ "relay-peer", required_argument, NULL, OPT_RELAY_PEER },
	{ "drain-timeout", required_argument, NULL, OPT_DRAIN },
	{ "port-file", required_argument, NULL, OPT_PORT_FILE },
	{ "log", required_argument, NULL, OPT_LOG },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, OPT_VERSION },
	{ NULL, 0, NULL, 0 },
};

static int num(const char *opt, const char *s, int64_t min, int64_t max, int64_t *out)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || end == s || *end || v < min || v > max) {
		fprintf(stderr, "agentd: --%s wants a whole number from %lld to %lld, not '%s'\n",
			opt, (long long)min, (long long)max, s);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

/* Seconds with an optional fraction, as whole milliseconds: 0, or 0.01 to 3600. */
static int seconds_ms(const char *opt, const char *s, int64_t *ms)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v == 0 || (v >= 0.01 && v <= 3600))) {
		fprintf(stderr, "agentd: --%s wants seconds from 0.01 to 3600 (0: off), not '%s'\n",
			opt, s);
		return -EINVAL;
	}
	*ms = (int64_t)(v * 1000 + 0.5);
	return 0;
}

/* ---- privileges (docs/security.md) ---- */

/*
 * What the tracer's threads keep: loading and attaching BPF programs and
 * uprobes in processes that start later (CAP_BPF, CAP_PERFMON, and
 * CAP_SYS_ADMIN: measured on 6.18, perf_event_open of a uprobe fails with
 * EACCES without it), reading /proc/PID/{maps,environ,root} of other users'
 * processes (CAP_SYS_PTRACE), opening their libraries wherever they live
 * (CAP_DAC_READ_SEARCH), and raising RLIMIT_MEMLOCK where the kernel still
 * charges BPF maps to it (CAP_SYS_RESOURCE). Everything else goes before the
 * tracer starts; the threads that serve queries keep nothing.
 */
#ifdef FLEETQ_HAVE_TRACE
static const int trace_caps[] = { CAP_SYS_ADMIN, CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH,
				  CAP_SYS_RESOURCE };
#endif

/*
 * Drops from this thread's bounding set every capability not in keep[] and
 * sets SECBIT_NOROOT (locked), so that no later exec, even as uid 0, gains a
 * capability. Needs CAP_SETPCAP; without it (not root, or already dropped)
 * there is nothing this could add, and it returns 0. Threads created
 * afterwards inherit the result; capabilities are per thread.
 */
static int caps_bound(const int *keep, size_t nkeep)
{
	int cap, last = CAP_LAST_CAP;
	size_t i;
	FILE *f;

	if (prctl(PR_CAPBSET_READ, CAP_SETPCAP, 0, 0, 0) != 1)
		return 0;
	/* The running kernel may know more capabilities than our headers. */
	f = fopen("/proc/sys/kernel/cap_last_cap", "r");
	if (f) {
		if (fscanf(f, "%d", &last) != 1 || last < 0 || last > 63)
			last = CAP_LAST_CAP;
		fclose(f);
	}
	if (prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED, 0, 0, 0) &&
	    errno != EPERM)
		return -errno;
	for (cap = 0; cap <= last; cap++) {
		int kept = 0;

		for (i = 0; i < nkeep; i++)
			kept |= keep[i] == cap;
		/* EPERM: CAP_SETPCAP is not effective here (not root): nothing to drop. */
		if (!kept && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) && errno != EINVAL &&
		    errno != EPERM)
			return -errno;
	}
	return 0;
}

/*
 * Sets this thread's effective and permitted capabilities to those of keep[]
 * it holds now (a container may have withheld some), the rest empty.
 */
static int caps_set(const int *keep, size_t nkeep)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct now[_LINUX_CAPABILITY_U32S_3] = { { 0 } };
	struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = { { 0 } };
	size_t i;

	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) && errno != EINVAL)
		return -errno;
	if (syscall(SYS_capget, &hdr, now))
		return -errno;
	for (i = 0; i < nkeep; i++) {
		unsigned idx = CAP_TO_INDEX(keep[i]), bit = CAP_TO_MASK(keep[i]);

		if (!(now[idx].permitted & bit))
			continue;
		data[idx].effective |= bit;
		data[idx].permitted |= bit;
	}
	return syscall(SYS_capset, &hdr, data) ? -errno : 0;
}

/*
 * The last step of setup, on the thread that then runs the event loop and
 * starts every query worker: optionally become user (supplementary groups,
 * gid, uid), then keep no capability at all, and let no exec gain any.
 * 0, or -errno with *cause.
 */
static int privs_drop(const char *user, char **cause)
{
	const char *step = "drop capabilities";
	int err;

	err = caps_bound(NULL, 0);
	if (err)
		goto fail;
	if (user) {
		struct passwd *pw;

		errno = 0;
		pw = getpwnam(user);
		if (!pw) {
			err = errno ? errno : ENOENT;
			if (asprintf(cause, "cannot switch to user '%s': %s; name an existing "
				     "user in --user", user,
				     errno ? strerror(errno) : "no such user") < 0)
				*cause = NULL;
			return -err;
		}
		/* glibc applies these to every thread of the process. */
		if (initgroups(pw->pw_name, pw->pw_gid) || setresgid(pw->pw_gid, pw->pw_gid,
								    pw->pw_gid) ||
		    setresuid(pw->pw_uid, pw->pw_uid, pw->pw_uid)) {
			err = errno;
			if (asprintf(cause, "cannot switch to user '%s': %s; run agentd as root "
				     "to use --user", user, strerror(err)) < 0)
				*cause = NULL;
			return -err;
		}
		step = "drop capabilities after switching user";
	}
	err = caps_set(NULL, 0);
	if (!err && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		err = -errno;
fail:
	if (err && asprintf(cause, "cannot %s: %s", step, strerror(-err)) < 0)
		*cause = NULL;
	return err;
}

int main(int argc, char **argv)
{
	static const char *allow[MAX_ALLOW], *relay_allow[MAX_ALLOW];
	struct server_opts so = {
		.max_rows = 1000000,
		.max_bytes = 256ll << 20,
		.timeout_ms = 30000,
		.max_queries = 8,
		.query_mem = 64ll << 20,
		.query_mem_total = 128ll << 20,
		.idle_timeout_s = 60,
		.handshake_timeout_s = 5,
		.max_conns = 256,
		.max_handshakes = 64,
		.max_per_source = 64,
		.frame_mem = 64ll << 20,
		.relay_max_dial = 64,
		.relay_allow = relay_allow,
		.drain_timeout_s = 10,
		.allow = allow,
	};
	const char *cgroup = NULL, *probes = NULL, *sysfs_root = NULL, *log_path = NULL;
	const char *user = NULL, *nvml_lib = NULL;
	int64_t ib_interval = 1, gpu_interval_ms = 1000, v;
	/*
	 * The trace must not fill a node's disk by default. The analyses read the
	 * last minutes (stragglers 60 s, gate 10 min): 4 GiB holds hours of a busy
	 * node's trace (docs/agentd.8), and a week is as far back as anyone looks.
	 */
	int64_t retain_bytes = 4ll << 30, retain_age_s = 7 * 86400;
	const char *retain_opt = NULL; /* the last retention option given */
	int insecure = 0, no_trace = 0, opt, rc = 1;
	struct sockaddr_storage ss;
	struct server *srv = NULL;
	char host[256], *cause = NULL;
	struct tracer *tracer = NULL;
	struct fqsql_limits lim = { 0 };
	sqlite3 *db = NULL;
	int sslen;

	fqsql_init_process();
	/*
	 * Blocks of 256 KiB and more (frames, query values, sorts) are mapped on
	 * their own and unmapped when freed. glibc's default raises this threshold
	 * each time such a block is freed, after which they come from the heap:
	 * realloc copies them, and a few MiB left in use above them pin the rest
	 * (20 sessions' 16 MiB frames stayed resident minutes after they closed).
	 */
	mallopt(M_MMAP_THRESHOLD, 256 << 10);
	mallopt(M_TRIM_THRESHOLD, 1 << 20);
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (opt) {
		case OPT_LISTEN:
			so.listen = optarg;
			break;
		case OPT_DB:
			so.db_path = optarg;
			break;
		case OPT_CA:
			so.ca = optarg;
			break;
		case OPT_CERT:
			so.cert = optarg;
			break;
		case OPT_KEY:
			so.key = optarg;
			break;
		case OPT_ALLOW:
			if (so.nallow == MAX_ALLOW) {
				fprintf(stderr, "agentd: at most %d --allow-client patterns\n",
					MAX_ALLOW);
				return 2;
			}
			allow[so.nallow++] = optarg;
			break;
		case OPT_INSECURE:
			insecure = 1;
			break;
		case OPT_NODE:
			so.node = optarg;
			break;
		case OPT_NO_TRACE:
			no_trace = 1;
			break;
		case OPT_CGROUP:
			cgroup = optarg;
			break;
		case OPT_PROBES:
			probes = optarg;
			break;
		case OPT_SYSFS:
			sysfs_root = optarg;
			break;
		case OPT_IB:
			if (num("ib-interval", optarg, 0, 86400, &ib_interval))
				return 2;
			break;
		case OPT_GPU:
			if (seconds_ms("gpu-interval", optarg, &gpu_interval_ms))
				return 2;
			break;
		case OPT_NVML_LIB:
			nvml_lib = optarg;
			break;
		case OPT_RETAIN_BYTES:
			if (num("retain-bytes", optarg, 0, INT64_MAX, &retain_bytes))
				return 2;
			/* Less leaves no room past the schema: every pass would empty the trace. */
			if (retain_bytes && retain_bytes < RETAIN_BYTES_MIN) {
				fprintf(stderr, "agentd: --retain-bytes %s is below %d, the least a "
						"trace needs: give at least that, or 0 for no bound\n",
					optarg, RETAIN_BYTES_MIN);
				return 2;
			}
			retain_opt = "--retain-bytes";
			break;
		case OPT_RETAIN_AGE:
			if (num("retain-age", optarg, 0, INT64_MAX / 1000000000, &retain_age_s))
				return 2;
			retain_opt = "--retain-age";
			break;
		case OPT_MAX_ROWS:
			if (num("max-rows", optarg, 1, INT64_MAX, &so.max_rows))
				return 2;
			break;
		case OPT_MAX_BYTES:
			if (num("max-bytes", optarg, 1, INT64_MAX, &so.max_bytes))
				return 2;
			break;
		case OPT_TIMEOUT:
			if (num("timeout-ms", optarg, 1, 86400000, &so.timeout_ms))
				return 2;
			break;
		case OPT_MAX_QUERIES:
			if (num("max-queries", optarg, 1, 1024, &v))
				return 2;
			so.max_queries = (int)v;
			break;
		case OPT_QUERY_MEM:
			if (num("query-mem", optarg, 1, 1 << 20, &v))
				return 2;
			so.query_mem = v << 20;
			break;
		case OPT_QUERY_MEM_TOTAL:
			if (num("query-mem-total", optarg, 1, 1 << 20, &v))
				return 2;
			so.query_mem_total = v << 20;
			break;
		case OPT_IDLE:
			if (num("idle-timeout", optarg, 1, 86400, &v))
				return 2;
			so.idle_timeout_s = (int)v;
			break;
		case OPT_HANDSHAKE:
			if (num("handshake-timeout", optarg, 1, 3600, &v))
				return 2;
			so.handshake_timeout_s = (int)v;
			break;
		case OPT_MAX_CONNS:
			if (num("max-conns", optarg, 1, 65536, &v))
				return 2;
			so.max_conns = (int)v;
			break;
		case OPT_MAX_HANDSHAKES:
			if (num("max-handshakes", optarg, 1, 65536, &v))
				return 2;
			so.max_handshakes = (int)v;
			break;
		case OPT_MAX_PER_SOURCE:
			if (num("max-conns-per-source", optarg, 1, 65536, &v))
				return 2;
			so.max_per_source = (int)v;
			break;
		case OPT_FRAME_MEM:
			if (num("frame-mem", optarg, 17, 1 << 20, &v))
				return 2;
			so.frame_mem = v << 20;
			break;
		case OPT_USER:
			user = optarg;
			break;
		case OPT_RELAY_MAX_DIAL:
			if (num("relay-max-dial", optarg, 1, 65536, &v))
				return 2;
			so.relay_max_dial = (int)v;
			break;
		case OPT_RELAY_PEER:
			if (so.nrelay_allow == MAX_ALLOW) {
				fprintf(stderr, "agentd: at most %d --relay-peer patterns\n",
					MAX_ALLOW);
				return 2;
			}
			relay_allow[so.nrelay_allow++] = optarg;
			break;
		case OPT_DRAIN:
			if (num("drain-timeout", optarg, 0, 3600, &v))
				return 2;
			so.drain_timeout_s = (int)v;
			break;
		case OPT_PORT_FILE:
			so.port_file = optarg;
			break;
		case OPT_LOG:
			log_path = optarg;
			break;
		case 'h':
			fputs(usage_text, stdout);
			return 0;
		case OPT_VERSION:
			printf("agentd %s (fleetq wire protocol %d, schema %d)\n", FLEETQ_VERSION,
			       WIRE_VERSION, FQSQL_SCHEMA_VERSION);
			return 0;
		default:
			fputs("agentd: see 'agentd --help'\n", stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "agentd: unexpected argument '%s'; see 'agentd --help'\n",
			argv[optind]);
		return 2;
	}
	if (!so.listen || !so.db_path) {
		fprintf(stderr, "agentd: --listen and --db are required; see 'agentd --help'\n");
		return 2;
	}
	if (server_parse_listen(so.listen, &ss, &sslen)) {
		fprintf(stderr,
			"agentd: cannot parse --listen '%s'; use ADDR:PORT, e.g. 0.0.0.0:7077 "
			"or [::]:7077\n",
			so.listen);
		return 2;
	}
	if (insecure && !server_is_loopback((struct sockaddr *)&ss)) {
		fprintf(stderr,
			"agentd: --insecure serves unauthenticated plaintext and is allowed "
			"only on loopback (127.0.0.0/8 or ::1), not on '%s'\n",
			so.listen);
		return 2;
	}
	if (!so.ca || !so.cert || !so.key) {
		if (!insecure || so.ca || so.cert || so.key) {
			fprintf(stderr,
				"agentd: --ca, --cert and --key are all required (make them with "
				"certs/mkcerts); --insecure without them serves plaintext on "
				"loopback only\n");
			return 2;
		}
	}
	if (!so.node) {
		if (gethostname(host, sizeof(host)))
			snprintf(host, sizeof(host), "unknown");
		host[sizeof(host) - 1] = '\0';
		so.node = host;
	}
	/* A user switch applies to every thread, the tracer's too, which needs root. */
	if (user && !no_trace) {
		fprintf(stderr, "agentd: --user works only with --no-trace: the tracer keeps root "
				"with a few capabilities (see docs/security.md)\n");
		return 2;
	}
	if (retain_opt && no_trace) {
		fprintf(stderr, "agentd: %s bounds the trace agentd writes: with --no-trace it "
				"writes none; drop one of them\n", retain_opt);
		return 2;
	}
#ifndef FLEETQ_HAVE_TRACE
	(void)cgroup, (void)probes, (void)sysfs_root, (void)tracer, (void)nvml_lib;
	(void)retain_bytes, (void)retain_age_s;
	if (!no_trace) {
		fprintf(stderr,
			"agentd: built without tracing (FLEETQ_BPF=OFF); run with --no-trace "
			"to serve only\n");
		return 2;
	}
#endif
	/* Before SQLite starts: query workers get budgets, the trace writer none. */
	if (fqsql_mem_install(so.query_mem_total)) {
		fprintf(stderr, "agentd: cannot install SQLite's memory budgets\n");
		return 1;
	}
	log_set_ident("agentd");
	if (log_path && log_open(log_path, &cause)) {
		fprintf(stderr, "agentd: %s\n", cause ? cause : "cannot open the log file");
		goto out;
	}
	/* Workers wake the loop from their threads; a write to a gone client must not kill us. */
	signal(SIGPIPE, SIG_IGN);
	if (evthread_use_pthreads() || tls_init()) {
		fprintf(stderr, "agentd: cannot initialise libevent threads or OpenSSL\n");
		goto out;
	}

	/* Bad TLS files are refused before the tracer attaches anything. */
	if (so.cert) {
		SSL_CTX *ctx = tls_ctx_new(so.ca, so.cert, so.key, &cause);

		if (!ctx) {
			fprintf(stderr, "agentd: %s\n", cause ? cause : "cannot load the TLS files");
			goto out;
		}
		SSL_CTX_free(ctx);
	}
#ifdef FLEETQ_HAVE_TRACE
	if (!no_trace) {
		struct trace_opts to = {
			.db_path = so.db_path,
			.node = so.node,
			.cgroup = cgroup,
			.probes = probes,
			.sysfs_root = sysfs_root,
			.ib_interval_s = (int)ib_interval,
			.gpu_interval_ms = (int)gpu_interval_ms,
			.nvml_lib = nvml_lib,
			.retain_bytes = retain_bytes,
			.retain_age_s = retain_age_s,
		};

		size_t ntc = sizeof(trace_caps) / sizeof(trace_caps[0]);
		int err = geteuid() == 0 ? caps_bound(trace_caps, ntc) : 0;

		/*
		 * The tracer's threads inherit this set; the loop thread drops the
		 * rest below. Not being root is no error: nothing to drop then.
		 */
		if (!err && geteuid() == 0)
			err = caps_set(trace_caps, ntc);
		if (err) {
			fprintf(stderr, "agentd: cannot limit capabilities before tracing: %s\n",
				strerror(-err));
			goto out;
		}
		tracer = tracer_start(&to, &cause);
		if (!tracer) {
			fprintf(stderr, "agentd: %s\n", cause ? cause : "cannot start the tracer");
			goto out;
		}
		so.tracer = tracer;
	}
#endif
	/* Refuse at start, not at the first query, when the database cannot be read. */
	if (fqsql_open_readonly(so.db_path, &lim, &db, &cause)) {
		fprintf(stderr, "agentd: %s\n", cause ? cause : "cannot open the database");
		goto out;
	}
	fqsql_close(db);

	srv = server_new(&so, &cause);
	if (!srv) {
		fprintf(stderr, "agentd: %s\n", cause ? cause : strerror(errno));
		goto out;
	}
	/* Start-up (BTF, BPF objects, /proc scans) freed more than steady state will use:
	 * give it back to the kernel rather than carry it in RSS. */
	malloc_trim(0);
	/* Listening, files open, probes attached: the network side needs no privilege. */
	if (privs_drop(user, &cause)) {
		fprintf(stderr, "agentd: %s\n", cause ? cause : "cannot drop privileges");
		log_line("%s", cause ? cause : "cannot drop privileges");
		goto out;
	}
	log_line("privileges: uid %d, no capabilities on the query side, no_new_privs",
		 (int)geteuid());
	if (server_run(srv) == 0)
		rc = 0;
	log_line("stopped");
out:
	server_free(srv);
#ifdef FLEETQ_HAVE_TRACE
	tracer_stop(tracer);
#endif
	free(cause);
	return rc;
}
