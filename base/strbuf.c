/* SPDX-License-Identifier: MIT */
#include "strbuf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void sb_release(struct strbuf *b)
{
	free(b->s);
	b->s = NULL;
	b->len = b->cap = 0;
	b->oom = 0;
}

int sb_grow(struct strbuf *b, size_t more)
{
	size_t need = b->len + more + 1, ncap;
	char *ns;

	if (b->oom)
		return -ENOMEM;
	if (need <= b->cap)
		return 0;
	ncap = b->cap ? b->cap : 256;
	while (ncap < need)
		ncap *= 2;
	ns = realloc(b->s, ncap);
	if (!ns) {
		b->oom = 1;
		return -ENOMEM;
	}
	b->s = ns;
	b->cap = ncap;
	return 0;
}

void sb_add(struct strbuf *b, const void *p, size_t n)
{
	if (sb_grow(b, n))
		return;
	memcpy(b->s + b->len, p, n);
	b->len += n;
	b->s[b->len] = 0;
}

void sb_printf(struct strbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (sb_grow(b, 64))
		return;
	va_start(ap, fmt);
	n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= b->cap - b->len) {
		if (sb_grow(b, n))
			return;
		va_start(ap, fmt);
		vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
	}
	b->len += n;
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when invalid. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	size_t len;
	unsigned cp;

	if (s[0] < 0x80)
		return 1;
	if ((s[0] & 0xe0) == 0xc0)
		len = 2, cp = s[0] & 0x1f;
	else if ((s[0] & 0xf0) == 0xe0)
		len = 3, cp = s[0] & 0x0f;
	else if ((s[0] & 0xf8) == 0xf0)
		len = 4, cp = s[0] & 0x07;
	else
		return 0;
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	/* Overlong forms, surrogates and values past U+10FFFF are not UTF-8. */
	if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
	    (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
		return 0;
	return len;
}

void sb_json_str(struct strbuf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, run;

	sb_putc(b, '"');
	while (i < n) {
		/* Copy runs of plain bytes in one go: most text needs no escaping. */
		for (run = i;
		     run < n && p[run] >= 0x20 && p[run] < 0x80 && p[run] != '"' && p[run] != '\\';
		     run++)
			;
		if (run > i) {
			sb_add(b, p + i, run - i);
			i = run;
			continue;
		}
		switch (p[i]) {
		case '"':
			sb_puts(b, "\\\"");
			break;
		case '\\':
			sb_puts(b, "\\\\");
			break;
		case '\n':
			sb_puts(b, "\\n");
			break;
		case '\r':
			sb_puts(b, "\\r");
			break;
		case '\t':
			sb_puts(b, "\\t");
			break;
		case '\b':
			sb_puts(b, "\\b");
			break;
		case '\f':
			sb_puts(b, "\\f");
			break;
		default:
			if (p[i] < 0x20) {
				char esc[6] = {
					'\\', 'u', '0', '0', hex[p[i] >> 4], hex[p[i] & 15]
				};

				sb_add(b, esc, 6);
			} else {
				size_t l = utf8_len(p + i, n - i);

				if (!l) {
					sb_puts(b, "\\ufffd");
					l = 1;
				} else {
					sb_add(b, p + i, l);
				}
				i += l;
				continue;
			}
		}
		i++;
	}
	sb_putc(b, '"');
}

char *sb_detach(struct strbuf *b)
{
	char *s;

	if (!b->s && !b->oom)
		sb_add(b, "", 0);
	if (b->oom) {
		sb_release(b);
		errno = ENOMEM;
		return NULL;
	}
	s = b->s;
	b->s = NULL;
	b->len = b->cap = 0;
	return s;
}

void sb_printable(struct strbuf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	size_t i = 0, run;
	char esc[4] = { '\\', 'x', 0, 0 };

	while (i < n) {
		for (run = i; run < n && (unsigned char)s[run] >= 0x20 && s[run] != 0x7f; run++)
			;
		sb_add(b, s + i, run - i);
		if (run == n)
			break;
		esc[2] = hex[(unsigned char)s[run] >> 4];
		esc[3] = hex[s[run] & 15];
		sb_add(b, esc, 4);
		i = run + 1;
	}
}

char *fq_printable(const char *s)
{
	struct strbuf b = STRBUF_INIT;

	sb_printable(&b, s, strlen(s));
	if (!b.s && !b.oom)
		return strdup("");
	return sb_detach(&b);
}
