/* SPDX-License-Identifier: MIT */
/* output: escaping of tricky values in every format; coverage summary, JSON and exit codes. */
#include <math.h>
#include <stdlib.h>

#include "check.h"
#include "coverage.h"
#include "output.h"

#define TXT(s)                                                  \
	{                                                       \
		.type = WIRE_TEXT, .p = (s), .n = sizeof(s) - 1 \
	}
#define INT(v)                             \
	{                                  \
		.type = WIRE_INT, .i = (v) \
	}
#define REAL(v)                             \
	{                                   \
		.type = WIRE_REAL, .d = (v) \
	}
#define NUL                       \
	{                         \
		.type = WIRE_NULL \
	}
#define BLOB(s)                                                 \
	{                                                       \
		.type = WIRE_BLOB, .p = (s), .n = sizeof(s) - 1 \
	}

static const char *const names[] = { "node", "v", "w" };

static const struct wire_value rows[][3] = {
	{ TXT("gpu01"), INT(INT64_MIN), REAL(0.1) },
	{ TXT("a,b"), TXT("say \"hi\"\r\n"), NUL },
	{ TXT("tab\there"), TXT("back\\slash\nnl"), BLOB("\x00\xff\x10") },
	{ TXT(""), INT(INT64_MAX), REAL(1.0) },
	{ TXT("\x01\xc3\xa9\xff"), REAL(-2.5e-300), REAL(1e300 * 1e300) },
};

static char *render(int format, const char *cov)
{
	struct output *o = output_new(-1, format);
	char *s;

	if (cov)
		output_with_coverage(o);
	CHECK(!output_begin(o, 3, names));
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		CHECK(!output_row(o, rows[i]));
	CHECK(!output_end(o, cov));
	s = strdup(output_text(o));
	output_free(o);
	return s;
}

static void test_formats(void)
{
	char *s;

	s = render(FQ_FMT_CSV, NULL);
	CHECK_STR(s, "node,v,w\n"
		     "gpu01,-9223372036854775808,0.1\n"
		     "\"a,b\",\"say \"\"hi\"\"\r\n\",\n"
		     "tab\there,\"back\\slash\nnl\",x'00ff10'\n"
		     "\"\",9223372036854775807,1.0\n"
		     "\x01\xc3\xa9\xff,-2.5e-300,Infinity\n");
	free(s);
	s = render(FQ_FMT_TSV, NULL);
	CHECK_STR(s, "node\tv\tw\n"
		     "gpu01\t-9223372036854775808\t0.1\n"
		     "a,b\tsay \"hi\"\\r\\n\t\n"
		     "tab\\there\tback\\\\slash\\nnl\tx'00ff10'\n"
		     "\t9223372036854775807\t1.0\n"
		     "\x01\xc3\xa9\xff\t-2.5e-300\tInfinity\n");
	free(s);
	s = render(FQ_FMT_JSON, "{\"total\":1}");
	CHECK_STR(s, "{\"columns\":[\"node\",\"v\",\"w\"],\"rows\":["
		     "[\"gpu01\",-9223372036854775808,0.1],"
		     "[\"a,b\",\"say \\\"hi\\\"\\r\\n\",null],"
		     "[\"tab\\there\",\"back\\\\slash\\nnl\",\"00ff10\"],"
		     "[\"\",9223372036854775807,1.0],"
		     "[\"\\u0001\xc3\xa9\\ufffd\",-2.5e-300,\"Infinity\"]],"
		     "\"coverage\":{\"total\":1}}\n");
	free(s);
	s = render(FQ_FMT_NDJSON, "{\"total\":1}");
	CHECK_STR(s, "{\"node\":\"gpu01\",\"v\":-9223372036854775808,\"w\":0.1}\n"
		     "{\"node\":\"a,b\",\"v\":\"say \\\"hi\\\"\\r\\n\",\"w\":null}\n"
		     "{\"node\":\"tab\\there\",\"v\":\"back\\\\slash\\nnl\",\"w\":\"00ff10\"}\n"
		     "{\"node\":\"\",\"v\":9223372036854775807,\"w\":1.0}\n"
		     "{\"node\":\"\\u0001\xc3\xa9\\ufffd\",\"v\":-2.5e-300,\"w\":\"Infinity\"}\n"
		     "{\"coverage\":{\"total\":1}}\n");
	free(s);
	/* by default rows only, objects keyed by column: what jq pipelines want */
	s = render(FQ_FMT_JSON, NULL);
	CHECK_STR(s, "[{\"node\":\"gpu01\",\"v\":-9223372036854775808,\"w\":0.1},\n"
		     "{\"node\":\"a,b\",\"v\":\"say \\\"hi\\\"\\r\\n\",\"w\":null},\n"
		     "{\"node\":\"tab\\there\",\"v\":\"back\\\\slash\\nnl\",\"w\":\"00ff10\"},\n"
		     "{\"node\":\"\",\"v\":9223372036854775807,\"w\":1.0},\n"
		     "{\"node\":\"\\u0001\xc3\xa9\\ufffd\",\"v\":-2.5e-300,\"w\":\"Infinity\"}]\n");
	free(s);
	s = render(FQ_FMT_NDJSON, NULL);
	CHECK(s && !strstr(s, "coverage") && strlen(s) > 0 && s[strlen(s) - 2] == '}');
	free(s);
	s = render(FQ_FMT_TABLE, NULL);
	CHECK_STR(s, "node       v                     w\n"
		     "---------  --------------------  ---------\n"
		     "gpu01      -9223372036854775808  0.1\n"
		     "a,b        say \"hi\"\\r\\n          \n"
		     "tab\\there  back\\\\slash\\nnl       x'00ff10'\n"
		     "           9223372036854775807   1.0\n"
		     "\\x01\xc3\xa9\xff     -2.5e-300             Infinity\n");
	free(s);
}

static void test_table(void)
{
	static const char *const n2[] = { "host", "n" };
	const struct wire_value r1[] = { TXT("a"), INT(5) }, r2[] = { TXT("bbbb"), INT(12345) };
	struct output *o = output_new(-1, FQ_FMT_TABLE);

	output_begin(o, 2, n2);
	output_row(o, r1);
	output_row(o, r2);
	output_end(o, NULL);
	/* Text left-aligned, numbers right-aligned. */
	CHECK_STR(output_text(o), "host      n\n"
				  "----  -----\n"
				  "a         5\n"
				  "bbbb  12345\n");
	output_free(o);
}

static void test_empty(void)
{
	struct output *o = output_new(-1, FQ_FMT_JSON);

	output_with_coverage(o);
	CHECK(!output_begin(o, 0, NULL));
	CHECK(!output_end(o, "{}"));
	CHECK_STR(output_text(o), "{\"columns\":[],\"rows\":[],\"coverage\":{}}\n");
	output_free(o);
	o = output_new(-1, FQ_FMT_JSON);
	CHECK(!output_begin(o, 0, NULL));
	CHECK(!output_end(o, "{}"));
	CHECK_STR(output_text(o), "[]\n");
	output_free(o);
	o = output_new(-1, FQ_FMT_NDJSON);
	CHECK(!output_end(o, "{}"));
	CHECK_STR(output_text(o), "");
	output_free(o);
}

static void test_doubles(void)
{
	static const double v[] = {
		0.1, 1.0 / 3, 1e21, -0.0, 123456789.125, 5e-324, 1.7976931348623157e308
	};
	char buf[40];

	/* Every double reads back exactly. */
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		output_fmt_double(buf, v[i]);
		CHECK(strtod(buf, NULL) == v[i]);
	}
	output_fmt_double(buf, 0.1);
	CHECK_STR(buf, "0.1");
	output_fmt_double(buf, 2.0);
	CHECK_STR(buf, "2.0");
	output_fmt_double(buf, NAN);
	CHECK_STR(buf, "NaN");
	output_fmt_double(buf, -INFINITY);
	CHECK_STR(buf, "-Infinity");
	CHECK(output_format_parse("ndjson") == FQ_FMT_NDJSON);
	CHECK(output_format_parse("xml") == -1);
}

static void test_coverage(void)
{
	static const char *const hosts[] = { "gpu01", "gpu02", "gpu03", "gpu04",
					     "gpu05", "gpu06", "gpu07", "gpu08" };
	struct coverage *c = coverage_new(8, hosts);
	char *s;

	coverage_set(c, 0, FQ_OK, 10, NULL);
	coverage_set(c, 1, FQ_OK, 5, NULL);
	coverage_set(c, 2, FQ_TIMEOUT, 0, "no END within 30s");
	coverage_set(c, 3, FQ_OK, 1, NULL);
	coverage_set(c, 4, FQ_SQL, 0, "no such table: foo");
	coverage_set(c, 5, FQ_OK, 0, NULL);
	coverage_set(c, 6, FQ_TIMEOUT, 0, "no END within 30s");
	coverage_set(c, 7, FQ_TRUNCATED, 100, "row limit, 100 rows kept");
	s = coverage_summary(c);
	CHECK_STR(s, "coverage: 4/8 nodes ok, 116 rows; timeout: gpu[03,07] (no END within 30s); "
		     "sql error: gpu05 (no such table: foo); truncated: gpu08 (row limit, 100 rows "
		     "kept)");
	free(s);
	s = coverage_json(c);
	CHECK(s && strstr(s, "\"total\":8,\"ok\":4,\"fraction\":0.5,\"rows\":116"));
	CHECK(s && strstr(s, "{\"outcome\":\"timeout\",\"nodes\":[\"gpu03\",\"gpu07\"],"
			     "\"hostlist\":\"gpu[03,07]\",\"message\":\"no END within 30s\"}"));
	free(s);
	CHECK(!coverage_common_failure(c));
	CHECK(coverage_exit(c, 1.0) == FQ_EXIT_COVERAGE);
	CHECK(coverage_exit(c, 0.5) == FQ_EXIT_OK);
	CHECK(coverage_exit(c, 0.0) == FQ_EXIT_OK);
	coverage_set(c, 2, FQ_TLS, 0, "agent certificate not accepted");
	CHECK(coverage_exit(c, 0.0) == FQ_EXIT_TLS);
	coverage_free(c);

	c = coverage_new(3, hosts);
	for (int i = 0; i < 3; i++)
		coverage_set(c, i, FQ_SQL, 0, "no such table: foo");
	s = coverage_common_failure(c);
	CHECK_STR(s, "sql error on all 3 nodes: no such table: foo");
	free(s);
	s = coverage_summary(c);
	CHECK_STR(s, "coverage: 0/3 nodes ok, 0 rows; sql error: gpu[01-03] (no such table: foo)");
	free(s);
	CHECK(coverage_exit(c, 1.0) == FQ_EXIT_COVERAGE);
	coverage_set(c, 1, FQ_SQL, 0, "other");
	CHECK(!coverage_common_failure(c));
	coverage_free(c);

	/* a reason that names each node's host is one reason */
	c = coverage_new(3, hosts);
	coverage_set(c, 0, FQ_UNREACHABLE, 0, "cannot resolve 'gpu01'");
	coverage_set(c, 1, FQ_UNREACHABLE, 0, "cannot resolve 'gpu02'");
	coverage_set(c, 2, FQ_UNREACHABLE, 0, "cannot resolve 'gpu01'");
	s = coverage_summary(c);
	CHECK_STR(s, "coverage: 0/3 nodes ok, 0 rows; unreachable: gpu[01-02] (cannot resolve "
		     "'<host>'); unreachable: gpu03 (cannot resolve 'gpu01')");
	free(s);
	coverage_free(c);

	/* plain English for two nodes and for one */
	c = coverage_new(2, hosts);
	coverage_set(c, 0, FQ_TLS, 0, "x");
	coverage_set(c, 1, FQ_TLS, 0, "x");
	s = coverage_common_failure(c);
	CHECK_STR(s, "tls on both nodes: x");
	free(s);
	coverage_free(c);
	c = coverage_new(1, hosts);
	coverage_set(c, 0, FQ_TLS, 0, "x");
	s = coverage_common_failure(c);
	CHECK_STR(s, "tls on 1 node: x");
	free(s);
	coverage_free(c);
}

int main(void)
{
	test_formats();
	test_table();
	test_empty();
	test_doubles();
	test_coverage();
	return check_done(NULL);
}
