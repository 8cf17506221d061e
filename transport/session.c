/* SPDX-License-Identifier: MIT */
#include "session.h"
#include "strbuf.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/x509.h>

/*
 * The cache file: MAGIC, then one record per session, integers big-endian:
 *   u16 key length, key ("host:port"), u64 expiry (time(), seconds),
 *   u32 DER length, i2d_SSL_SESSION DER, SHA-256 of the record so far.
 * The checksum matters: a session whose secret was damaged on disk would
 * still decode, and its resumption would fail the handshake instead of
 * falling back to a full one.
 */
#define MAGIC "fleetq-sessions 1\n"
#define MAGIC_LEN (sizeof(MAGIC) - 1)
#define SUM_LEN 32
#define MAX_FILE (64u << 20)
#define MAX_KEY 512
#define MAX_DER (64u << 10)
/* RFC 8446 4.6.1: no ticket outlives 7 days, so an older file holds nothing usable. */
#define MAX_LIFETIME_S (7 * 86400)
#define BUCKETS 4096

struct entry {
	struct entry *next;
	SSL_SESSION *s;	     /* decoded, or NULL */
	unsigned char *der;  /* from the file, not decoded yet */
	size_t derlen;
	unsigned char sum[SUM_LEN]; /* the file's checksum of der's record */
	int64_t expires;
	char key[];	     /* "SCOPE host:port" */
};

/* A scope whose file was read: saved again only when it has new sessions. */
struct scope {
	struct scope *next;
	int dirty;
	char id[SESSION_SCOPE_LEN + 1];
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct entry *tab[BUCKETS];
static struct scope *scopes;
static int key_idx = -1; /* SSL ex_data: the key a connection's session goes under */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static size_t hash(const char *key)
{
	uint32_t h = 2166136261u;

	for (; *key; key++)
		h = (h ^ (unsigned char)*key) * 16777619u;
	return h % BUCKETS;
}

static void entry_clear(struct entry *e)
{
	SSL_SESSION_free(e->s);
	e->s = NULL;
	free(e->der);
	e->der = NULL;
	e->derlen = 0;
}

static void release_all(void)
{
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < BUCKETS; i++)
		while (tab[i]) {
			struct entry *e = tab[i];

			tab[i] = e->next;
			entry_clear(e);
			free(e);
		}
	while (scopes) {
		struct scope *s = scopes;

		scopes = s->next;
		free(s);
	}
	pthread_mutex_unlock(&mu);
}

static void init(void)
{
	key_idx = SSL_get_ex_new_index(0, "fleetq session key", NULL, NULL, NULL);
	atexit(release_all);
}

/* Under mu. */
static struct entry *find(const char *key, int create)
{
	struct entry **head = &tab[hash(key)], *e;

	for (e = *head; e; e = e->next)
		if (!strcmp(e->key, key))
			return e;
	if (!create || !(e = calloc(1, sizeof(*e) + strlen(key) + 1)))
		return NULL;
	strcpy(e->key, key);
	e->next = *head;
	*head = e;
	return e;
}

/* Under mu. */
static struct scope *find_scope(const char *id)
{
	struct scope *s;

	for (s = scopes; s; s = s->next)
		if (!strncmp(s->id, id, SESSION_SCOPE_LEN))
			return s;
	return NULL;
}

static int64_t now_s(void)
{
	return (int64_t)time(NULL);
}

/* When s stops being worth offering: its lifetime, or the ticket's when shorter. */
static int64_t expiry(const SSL_SESSION *s)
{
	int64_t life = SSL_SESSION_get_timeout(s);
	unsigned long hint = SSL_SESSION_get_ticket_lifetime_hint(s);

	if (hint && (int64_t)hint < life)
		life = (int64_t)hint;
	return (int64_t)SSL_SESSION_get_time(s) + life;
}

static void put_be(unsigned char *p, uint64_t v, int n)
{
	for (int i = n - 1; i >= 0; i--, v >>= 8)
		p[i] = (unsigned char)v;
}

static uint64_t get_be(const unsigned char *p, int n)
{
	uint64_t v = 0;

	for (int i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

/* The record's header: key length, key, expiry, DER length. Returns its size. */
static size_t record_head(unsigned char *out, const char *host, size_t hl, int64_t expires,
			  size_t derlen)
{
	put_be(out, hl, 2);
	memcpy(out + 2, host, hl);
	put_be(out + 2 + hl, (uint64_t)expires, 8);
	put_be(out + 10 + hl, derlen, 4);
	return 14 + hl;
}

static int record_sum(const unsigned char *head, size_t hlen, const unsigned char *der,
		      size_t derlen, unsigned char *sum)
{
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	int ok = c && EVP_DigestInit_ex(c, EVP_sha256(), NULL) &&
		 EVP_DigestUpdate(c, head, hlen) && EVP_DigestUpdate(c, der, derlen) &&
		 EVP_DigestFinal_ex(c, sum, NULL);

	EVP_MD_CTX_free(c);
	return ok ? 0 : -ENOMEM;
}

/* Under mu: e's file session, decoded when its checksum holds. */
static void decode(struct entry *e)
{
	unsigned char head[14 + MAX_KEY], sum[SUM_LEN];
	const char *host = strchr(e->key, ' ') + 1;
	const unsigned char *p = e->der;
	size_t hl = record_head(head, host, strlen(host), e->expires, e->derlen);

	if (!record_sum(head, hl, e->der, e->derlen, sum) && !memcmp(sum, e->sum, SUM_LEN))
		e->s = d2i_SSL_SESSION(NULL, &p, (long)e->derlen);
	if (e->s && p != e->der + e->derlen) {
		SSL_SESSION_free(e->s);
		e->s = NULL;
	}
	free(e->der);
	e->der = NULL;
	e->derlen = 0;
}

static int new_session_cb(SSL *ssl, SSL_SESSION *s)
{
	const char *key = key_idx >= 0 ? SSL_get_ex_data(ssl, key_idx) : NULL;
	struct scope *sc;
	struct entry *e;

	if (!key)
		return 0;
	pthread_mutex_lock(&mu);
	e = find(key, 1);
	if (e) {
		entry_clear(e);
		e->s = s;
		e->expires = expiry(s);
		sc = find_scope(key);
		if (sc)
			sc->dirty = 1;
	}
	pthread_mutex_unlock(&mu);
	return e ? 1 : 0; /* 1: the table owns s */
}

void session_setup(SSL_CTX *ctx)
{
	pthread_once(&once, init);
	SSL_CTX_set_session_cache_mode(ctx,
				       SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
	SSL_CTX_sess_set_new_cb(ctx, new_session_cb);
}

int session_scope(SSL_CTX *ctx, char *scope)
{
	X509 *crt = SSL_CTX_get0_certificate(ctx);
	X509_STORE *store = SSL_CTX_get_cert_store(ctx);
	STACK_OF(X509_OBJECT) *objs = store ? X509_STORE_get0_objects(store) : NULL;
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n;
	int err = -ENOMEM;

	if (!c || !EVP_DigestInit_ex(c, EVP_sha256(), NULL))
		goto out;
	err = -EINVAL;
	if (!crt || !X509_digest(crt, EVP_sha256(), md, &n) || !EVP_DigestUpdate(c, md, n))
		goto out;
	for (int i = 0; objs && i < sk_X509_OBJECT_num(objs); i++) {
		X509 *ca = X509_OBJECT_get0_X509(sk_X509_OBJECT_value(objs, i));

		if (ca && (!X509_digest(ca, EVP_sha256(), md, &n) || !EVP_DigestUpdate(c, md, n)))
			goto out;
	}
	if (!EVP_DigestFinal_ex(c, md, NULL))
		goto out;
	for (int i = 0; i < SESSION_SCOPE_LEN / 2; i++)
		snprintf(scope + 2 * i, 3, "%02x", md[i]);
	err = 0;
out:
	EVP_MD_CTX_free(c);
	return err;
}

static char *file_path(const char *dir, const char *scope)
{
	char *p;

	return asprintf(&p, "%s/sessions-%.*s", dir, SESSION_SCOPE_LEN, scope) < 0 ? NULL : p;
}

/* The whole file, when it is ours alone; NULL otherwise. */
static unsigned char *read_private(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	unsigned char *buf = NULL;
	struct stat st;
	size_t got = 0;

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
	    (st.st_mode & 077) || st.st_size < (off_t)MAGIC_LEN || st.st_size > (off_t)MAX_FILE)
		goto out;
	buf = malloc((size_t)st.st_size);
	while (buf && got < (size_t)st.st_size) {
		ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);

		if (r <= 0) {
			free(buf);
			buf = NULL;
			break;
		}
		got += (size_t)r;
	}
	*len = got;
out:
	close(fd);
	return buf;
}

size_t session_load(const char *dir, const char *scope)
{
	char *path = NULL, key[SESSION_SCOPE_LEN + 2 + MAX_KEY];
	unsigned char *buf = NULL, *p, *end;
	struct scope *sc;
	size_t len = 0, taken = 0;
	int64_t now = now_s();

	pthread_once(&once, init);
	pthread_mutex_lock(&mu);
	sc = find_scope(scope);
	if (!sc && (sc = calloc(1, sizeof(*sc)))) {
		snprintf(sc->id, sizeof(sc->id), "%s", scope);
		sc->next = scopes;
		scopes = sc;
	} else {
		sc = NULL; /* read already, or no memory to remember it */
	}
	pthread_mutex_unlock(&mu);
	if (!sc || !(path = file_path(dir, scope)) || !(buf = read_private(path, &len)) ||
	    memcmp(buf, MAGIC, MAGIC_LEN))
		goto out;
	p = buf + MAGIC_LEN;
	end = buf + len;
	pthread_mutex_lock(&mu);
	/* Up to the first record that does not fit: a truncated file keeps its head. */
	while (end - p >= 2) {
		size_t hl = get_be(p, 2), derlen;
		int64_t expires;
		struct entry *e;

		if (!hl || hl > MAX_KEY || (size_t)(end - p) < 14 + hl)
			break;
		expires = (int64_t)get_be(p + 2 + hl, 8);
		derlen = get_be(p + 10 + hl, 4);
		if (!derlen || derlen > MAX_DER || (size_t)(end - p) < 14 + hl + derlen + SUM_LEN)
			break;
		snprintf(key, sizeof(key), "%s %.*s", scope, (int)hl, (const char *)p + 2);
		e = expires > now && strlen(key) == SESSION_SCOPE_LEN + 1 + hl ? find(key, 1)
									       : NULL;
		/* A session this process already has is newer than the file's. */
		if (e && !e->s && !e->der && (e->der = malloc(derlen))) {
			memcpy(e->der, p + 14 + hl, derlen);
			memcpy(e->sum, p + 14 + hl + derlen, SUM_LEN);
			e->derlen = derlen;
			e->expires = expires;
			taken++;
		}
		p += 14 + hl + derlen + SUM_LEN;
	}
	pthread_mutex_unlock(&mu);
out:
	free(buf);
	free(path);
	return taken;
}

void session_offer(SSL *ssl, const char *key)
{
	SSL_SESSION *s = NULL;
	struct entry *e;

	pthread_once(&once, init);
	SSL_set_ex_data(ssl, key_idx, (void *)key);
	pthread_mutex_lock(&mu);
	e = find(key, 0);
	if (e && e->expires <= now_s())
		entry_clear(e);
	if (e && e->der)
		decode(e);
	if (e && e->s && SSL_SESSION_is_resumable(e->s) && SSL_SESSION_up_ref(e->s))
		s = e->s;
	pthread_mutex_unlock(&mu);
	if (s) {
		SSL_set_session(ssl, s);
		SSL_SESSION_free(s);
	}
}

/* A DER tag and length (at most 3 length bytes): the header's size, or 0. */
static size_t der_head(const unsigned char *p, size_t n, size_t *len)
{
	size_t k;

	if (n < 2)
		return 0;
	if (p[1] < 0x80) {
		*len = p[1];
		return 2;
	}
	k = p[1] & 0x7f;
	if (k < 1 || k > 3 || n < 2 + k)
		return 0;
	*len = 0;
	for (size_t i = 0; i < k; i++)
		*len = *len << 8 | p[2 + i];
	return 2 + k;
}

/* a and b resume alike: same secret, ticket, version, cipher and lifetime. */
static int same_resumption(const SSL_SESSION *a, const SSL_SESSION *b)
{
	unsigned char ka[64], kb[64];
	const unsigned char *ta, *tb;
	size_t la = SSL_SESSION_get_master_key(a, NULL, 0), tla, tlb;
	int same;

	if (la > sizeof(ka) || la != SSL_SESSION_get_master_key(b, NULL, 0))
		return 0;
	SSL_SESSION_get_master_key(a, ka, la);
	SSL_SESSION_get_master_key(b, kb, la);
	SSL_SESSION_get0_ticket(a, &ta, &tla);
	SSL_SESSION_get0_ticket(b, &tb, &tlb);
	same = !CRYPTO_memcmp(ka, kb, la) && tla == tlb && (!tla || !memcmp(ta, tb, tla)) &&
	       SSL_SESSION_get_protocol_version(a) == SSL_SESSION_get_protocol_version(b) &&
	       SSL_SESSION_get0_cipher(a) && SSL_SESSION_get0_cipher(b) &&
	       SSL_CIPHER_get_id(SSL_SESSION_get0_cipher(a)) ==
		       SSL_CIPHER_get_id(SSL_SESSION_get0_cipher(b)) &&
	       SSL_SESSION_get_time(a) == SSL_SESSION_get_time(b) &&
	       SSL_SESSION_get_timeout(a) == SSL_SESSION_get_timeout(b) &&
	       SSL_SESSION_get_ticket_lifetime_hint(a) == SSL_SESSION_get_ticket_lifetime_hint(b);
	OPENSSL_cleanse(ka, sizeof(ka));
	OPENSSL_cleanse(kb, sizeof(kb));
	return same;
}

/*
 * Without the agent's certificate: [3] of OpenSSL's SSL_SESSION_ASN1.
 * OpenSSL 3.0 spends about 100 us decoding a certificate, nearly all of a
 * d2i_SSL_SESSION, and a client has no use for it once verified (the
 * session keeps the verdict, and is only offered to the host it was
 * verified for). The shorter DER is kept only if it decodes to a session
 * without certificate that resumes alike; else the whole one.
 */
unsigned char *session_encode(SSL_SESSION *s, size_t *n)
{
	unsigned char *der = NULL, *out = NULL;
	const unsigned char *p, *end;
	SSL_SESSION *back = NULL;
	size_t len, h, body = 0, hs, o;
	int dn = i2d_SSL_SESSION(s, &der);

	if (dn <= 0 || (size_t)dn > MAX_DER)
		goto fail;
	h = der_head(der, (size_t)dn, &len);
	if (!h || der[0] != 0x30 || h + len != (size_t)dn)
		goto whole;
	end = der + dn;
	for (p = der + h; p < end;) {
		size_t clen, ch = der_head(p, (size_t)(end - p), &clen);

		if (!ch || clen > (size_t)(end - p) - ch)
			goto whole;
		if (p[0] != 0xa3)
			body += ch + clen;
		p += ch + clen;
	}
	if (body == len)
		goto whole;
	hs = body < 0x80 ? 2 : body < 0x100 ? 3 : 4;
	out = malloc(hs + body);
	if (!out)
		goto fail;
	o = 0;
	out[o++] = 0x30;
	if (hs > 2)
		out[o++] = (unsigned char)(0x80 | (hs - 2));
	if (hs == 4)
		out[o++] = (unsigned char)(body >> 8);
	out[o++] = (unsigned char)body;
	for (p = der + h; p < end;) {
		size_t clen = 0, ch = der_head(p, (size_t)(end - p), &clen);

		if (p[0] != 0xa3) {
			memcpy(out + o, p, ch + clen);
			o += ch + clen;
		}
		p += ch + clen;
	}
	p = out;
	back = d2i_SSL_SESSION(NULL, &p, (long)o);
	if (back && p == out + o && !SSL_SESSION_get0_peer(back) && same_resumption(s, back)) {
		SSL_SESSION_free(back);
		OPENSSL_free(der);
		*n = o;
		return out;
	}
	SSL_SESSION_free(back);
	free(out);
whole:
	out = malloc((size_t)dn);
	if (out) {
		memcpy(out, der, (size_t)dn);
		*n = (size_t)dn;
	}
	OPENSSL_free(der);
	return out;
fail:
	OPENSSL_free(der);
	return NULL;
}

/* Under mu: scope's live sessions as the file's bytes (b->oom on failure). */
static void encode(struct strbuf *b, const char *scope)
{
	int64_t now = now_s();

	sb_add(b, MAGIC, MAGIC_LEN);
	for (size_t i = 0; i < BUCKETS; i++)
		for (struct entry *e = tab[i]; e; e = e->next) {
			unsigned char head[14 + MAX_KEY], sum[SUM_LEN], *der;
			const char *host = e->key + SESSION_SCOPE_LEN + 1;
			size_t hl = strlen(host), hlen, n = 0;

			if (strncmp(e->key, scope, SESSION_SCOPE_LEN) || e->expires <= now ||
			    hl > MAX_KEY)
				continue;
			if (e->s) {
				/* One whose connection failed is marked so by OpenSSL. */
				if (!SSL_SESSION_is_resumable(e->s))
					continue;
				der = session_encode(e->s, &n);
				if (!der)
					continue;
				hlen = record_head(head, host, hl, e->expires, n);
				if (record_sum(head, hlen, der, n, sum)) {
					b->oom = 1;
				} else {
					sb_add(b, head, hlen);
					sb_add(b, der, n);
					sb_add(b, sum, SUM_LEN);
				}
				free(der);
			} else if (e->der) {
				/* Not dialled this time: the file's record, as it was. */
				hlen = record_head(head, host, hl, e->expires, e->derlen);
				sb_add(b, head, hlen);
				sb_add(b, e->der, e->derlen);
				sb_add(b, e->sum, SUM_LEN);
			}
		}
}

/* dir, and its parent when that is missing too ($XDG_CACHE_HOME, ~/.cache). */
static int make_dir(const char *dir)
{
	char *parent, *slash;
	int err = 0;

	if (!mkdir(dir, 0700) || errno == EEXIST)
		return 0;
	if (errno != ENOENT)
		return -errno;
	parent = strdup(dir);
	if (!parent)
		return -ENOMEM;
	slash = strrchr(parent, '/');
	if (slash && slash != parent) {
		*slash = '\0';
		if (mkdir(parent, 0700) && errno != EEXIST)
			err = -errno;
	}
	free(parent);
	if (!err && mkdir(dir, 0700) && errno != EEXIST)
		err = -errno;
	return err;
}

/* Files of scopes last written more than a ticket's longest life ago (another
 * client certificate, another CA) and temporary files of runs that died. */
static void prune(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	struct stat st;
	time_t old = time(NULL) - MAX_LIFETIME_S;

	if (!d)
		return;
	while ((de = readdir(d)))
		if ((!strncmp(de->d_name, "sessions-", 9) ||
		     !strncmp(de->d_name, ".sessions-", 10)) &&
		    !fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) &&
		    S_ISREG(st.st_mode) && st.st_mtime < old)
			unlinkat(dirfd(d), de->d_name, 0);
	closedir(d);
}

int session_save(const char *dir, const char *scope)
{
	struct strbuf b = STRBUF_INIT;
	char *path = NULL, *tmp = NULL;
	struct scope *sc;
	size_t off = 0;
	int fd = -1, err = 0;

	pthread_mutex_lock(&mu);
	sc = find_scope(scope);
	if (!sc || !sc->dirty) {
		pthread_mutex_unlock(&mu);
		return 0;
	}
	encode(&b, scope);
	sc->dirty = 0;
	pthread_mutex_unlock(&mu);
	err = -ENOMEM;
	path = file_path(dir, scope);
	if (b.oom || !path || asprintf(&tmp, "%s/.sessions-%.*s.XXXXXX", dir, SESSION_SCOPE_LEN,
				       scope) < 0) {
		tmp = NULL;
		goto out;
	}
	err = make_dir(dir);
	if (err)
		goto out;
	/* mkstemp: mode 0600, a name no concurrent run uses; rename: readers see
	 * the old file or the new one, never half of one. */
	fd = mkstemp(tmp);
	if (fd < 0) {
		err = -errno;
		goto out;
	}
	while (off < b.len) {
		ssize_t w = write(fd, b.s + off, b.len - off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			err = w < 0 ? -errno : -EIO;
			goto out;
		}
		off += (size_t)w;
	}
	if (close(fd)) {
		fd = -1;
		err = -errno;
		goto out;
	}
	fd = -1;
	if (rename(tmp, path)) {
		err = -errno;
		goto out;
	}
	free(tmp);
	tmp = NULL;
	prune(dir);
out:
	if (fd >= 0)
		close(fd);
	if (tmp)
		unlink(tmp);
	free(tmp);
	free(path);
	sb_release(&b);
	return err;
}
