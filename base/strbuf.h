/* SPDX-License-Identifier: MIT */
/*
 * Growable text buffer for building output and messages. A failed
 * allocation latches oom; callers check once at the end.
 */
#ifndef FLEETQ_STRBUF_H
#define FLEETQ_STRBUF_H

#include <stddef.h>
#include <string.h>

#include "cause.h"

struct strbuf {
	char *s; /* NUL-terminated once anything was added */
	size_t len, cap;
	int oom;
};

#define STRBUF_INIT           \
	{                     \
		NULL, 0, 0, 0 \
	}

void sb_release(struct strbuf *b);
int sb_grow(struct strbuf *b, size_t more); /* 0 or -ENOMEM */
void sb_add(struct strbuf *b, const void *p, size_t n);
__attribute__((format(printf, 2, 3))) void sb_printf(struct strbuf *b, const char *fmt, ...);
/* A JSON string literal, quotes included; invalid UTF-8 becomes U+FFFD. */
void sb_json_str(struct strbuf *b, const char *s, size_t n);
/*
 * Text bound for a terminal: control bytes (ESC, BEL, CR, NL ...) and DEL
 * become \xHH, so no agent can move the cursor, set the title or clear the
 * screen through a message; a backslash stays one.
 */
void sb_printable(struct strbuf *b, const char *s, size_t n);
/* The same as a malloc'd string (NULL: out of memory). */
char *fq_printable(const char *s);
/* Returns the malloc'd text (never NULL unless oom) and empties b. */
char *sb_detach(struct strbuf *b);

static inline void sb_puts(struct strbuf *b, const char *s)
{
	sb_add(b, s, strlen(s));
}

static inline void sb_putc(struct strbuf *b, char c)
{
	if (b->len + 2 <= b->cap) {
		b->s[b->len++] = c;
		b->s[b->len] = 0;
	} else {
		sb_add(b, &c, 1);
	}
}

#endif
