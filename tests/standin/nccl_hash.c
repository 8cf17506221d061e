/* SPDX-License-Identifier: MIT */
/* standin_nccl_hash HEX: NCCL's communicator hash of a 128-byte unique id given in hex. */
#include <stdio.h>
#include <string.h>

#include "../../agentd/ncclprof/nccl_profiler.h"

int main(int argc, char **argv)
{
	unsigned char id[128];

	if (argc != 2 || strlen(argv[1]) != 2 * sizeof(id)) {
		fprintf(stderr, "usage: standin_nccl_hash <256 hex digits>\n");
		return 2;
	}
	for (size_t i = 0; i < sizeof(id); i++) {
		unsigned int b;

		if (sscanf(argv[1] + 2 * i, "%2x", &b) != 1) {
			fprintf(stderr, "standin_nccl_hash: not hex: '%s'\n", argv[1]);
			return 2;
		}
		id[i] = (unsigned char)b;
	}
	printf("%016llx\n", (unsigned long long)fq_nccl_hash(id, sizeof(id)));
	return 0;
}
