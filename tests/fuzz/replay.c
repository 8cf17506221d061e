/* SPDX-License-Identifier: MIT */
/*
 * Runs fuzz_wire.c's entry point over corpus files without libFuzzer, so
 * the corpus is a regression test in every build. Arguments are files or
 * directories; fails if nothing was read.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	long n;
	int rc = -1;

	if (!f) {
		fprintf(stderr, "cannot open '%s'\n", path);
		return -1;
	}
	if (fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET))
		goto out;
	buf = malloc(n ? (size_t)n : 1);
	if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n)
		goto out;
	LLVMFuzzerTestOneInput(buf, (size_t)n);
	rc = 0;
out:
	free(buf);
	fclose(f);
	return rc;
}

int main(int argc, char **argv)
{
	int files = 0, i;

	for (i = 1; i < argc; i++) {
		struct stat st;
		DIR *d;
		struct dirent *e;
		char path[4096];

		if (stat(argv[i], &st)) {
			fprintf(stderr, "cannot stat '%s'\n", argv[i]);
			return 1;
		}
		if (!S_ISDIR(st.st_mode)) {
			if (run_file(argv[i]))
				return 1;
			files++;
			continue;
		}
		d = opendir(argv[i]);
		if (!d)
			return 1;
		while ((e = readdir(d))) {
			if (e->d_name[0] == '.')
				continue;
			snprintf(path, sizeof(path), "%s/%s", argv[i], e->d_name);
			if (run_file(path)) {
				closedir(d);
				return 1;
			}
			files++;
		}
		closedir(d);
	}
	printf("replayed %d inputs\n", files);
	return files ? 0 : 1;
}
