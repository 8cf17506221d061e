/* SPDX-License-Identifier: MIT */
#include "probe.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fqtrace.h"

#define NCCL(n, l, k, cm, cn, dt, ro, pe, st) \
	{ n, l, PROBE_NCCL, k, cm, cn, dt, ro, pe, st }
#define CUDA(n, set, k, cn, st) { n, n, set, k, 0, cn, 0, 0, 0, st }

/*
 * Argument positions follow the NCCL 2.x / CUDA x86-64 ABI. dim3 (12 bytes) takes two
 * registers, so cudaLaunchKernel's stream is the 8th word; cuLaunchKernel's hStream is the 9th.
 */
const struct probe_fn probe_fns[] = {
	{ "", "", 0, 0, 0, 0, 0, 0, 0, 0 }, /* id 0: none */
	NCCL("ncclAllReduce", "AllReduce", FQ_K_COLL, 6, 3, 4, 5, 0, 7),
	NCCL("ncclAllGather", "AllGather", FQ_K_COLL, 5, 3, 4, 0, 0, 6),
	NCCL("ncclReduceScatter", "ReduceScatter", FQ_K_COLL, 6, 3, 4, 5, 0, 7),
	NCCL("ncclBroadcast", "Broadcast", FQ_K_COLL, 6, 3, 4, 0, 5, 7),
	NCCL("ncclBcast", "Broadcast", FQ_K_COLL, 5, 2, 3, 0, 4, 6),
	NCCL("ncclReduce", "Reduce", FQ_K_COLL, 7, 3, 4, 5, 6, 8),
	NCCL("ncclAlltoAll", "AllToAll", FQ_K_COLL, 5, 3, 4, 0, 0, 6),
	NCCL("ncclAllToAll", "AllToAll", FQ_K_COLL, 5, 3, 4, 0, 0, 6),
	NCCL("ncclGather", "Gather", FQ_K_COLL, 6, 3, 4, 0, 5, 7),
	NCCL("ncclScatter", "Scatter", FQ_K_COLL, 6, 3, 4, 0, 5, 7),
	NCCL("ncclSend", "Send", FQ_K_P2P, 5, 2, 3, 0, 4, 6),
	NCCL("ncclRecv", "Recv", FQ_K_P2P, 5, 2, 3, 0, 4, 6),
	NCCL("ncclCommInitRank", "ncclCommInitRank", FQ_K_INIT, 0, 0, 0, 0, 0, 0),
	NCCL("ncclCommInitRankConfig", "ncclCommInitRankConfig", FQ_K_INIT, 0, 0, 0, 0, 0, 0),
	NCCL("ncclCommInitRankScalable", "ncclCommInitRankScalable", FQ_K_INIT_SCALABLE, 0, 0, 0,
	     0, 0, 0),
	NCCL("ncclCommInitAll", "ncclCommInitAll", FQ_K_INIT_ALL, 0, 0, 0, 0, 0, 0),
	NCCL("ncclCommSplit", "ncclCommSplit", FQ_K_SPLIT, 0, 0, 0, 0, 0, 0),
	NCCL("ncclCommDestroy", "ncclCommDestroy", FQ_K_DESTROY, 1, 0, 0, 0, 0, 0),
	NCCL("ncclCommAbort", "ncclCommAbort", FQ_K_DESTROY, 1, 0, 0, 0, 0, 0),
	NCCL("ncclGroupStart", "ncclGroupStart", FQ_K_GROUP_START, 0, 0, 0, 0, 0, 0),
	NCCL("ncclGroupEnd", "ncclGroupEnd", FQ_K_GROUP_END, 0, 0, 0, 0, 0, 0),
	/* fleetq's NCCL profiler plugin (agentd/ncclprof/): its record hand-over */
	NCCL("fq_nccl_kernel_done", "fq_nccl_kernel_done", FQ_K_PROF, 0, 0, 0, 0, 0, 0),
	/* fleetq's CUDA injection library (agentd/cupti/): its GPU-busy slices */
	NCCL("fq_gpu_busy_done", "fq_gpu_busy_done", FQ_K_BUSY, 0, 0, 0, 0, 0, 0),

	CUDA("cudaStreamSynchronize", PROBE_SYNC, FQ_K_SYNC, 0, 1),
	CUDA("cudaStreamSynchronize_ptsz", PROBE_SYNC, FQ_K_SYNC, 0, 1),
	CUDA("cudaDeviceSynchronize", PROBE_SYNC, FQ_K_SYNC, 0, 0),
	CUDA("cudaEventSynchronize", PROBE_SYNC, FQ_K_SYNC, 0, 0),
	CUDA("cuStreamSynchronize", PROBE_SYNC, FQ_K_SYNC, 0, 1),
	CUDA("cuStreamSynchronize_ptsz", PROBE_SYNC, FQ_K_SYNC, 0, 1),
	CUDA("cuCtxSynchronize", PROBE_SYNC, FQ_K_SYNC, 0, 0),
	CUDA("cuCtxSynchronize_v2", PROBE_SYNC, FQ_K_SYNC, 0, 0),
	CUDA("cuEventSynchronize", PROBE_SYNC, FQ_K_SYNC, 0, 0),

	CUDA("cudaLaunchKernel", PROBE_LAUNCH, FQ_K_LAUNCH, 0, 8),
	CUDA("cudaLaunchKernel_ptsz", PROBE_LAUNCH, FQ_K_LAUNCH, 0, 8),
	CUDA("cuLaunchKernel", PROBE_LAUNCH, FQ_K_LAUNCH, 0, 9),
	CUDA("cuLaunchKernel_ptsz", PROBE_LAUNCH, FQ_K_LAUNCH, 0, 9),

	CUDA("cudaMemcpy", PROBE_MEMCPY, FQ_K_MEMCPY, 3, 0),
	CUDA("cudaMemcpy_ptds", PROBE_MEMCPY, FQ_K_MEMCPY, 3, 0),
	CUDA("cudaMemcpyAsync", PROBE_MEMCPY, FQ_K_MEMCPY, 3, 5),
	CUDA("cudaMemcpyAsync_ptsz", PROBE_MEMCPY, FQ_K_MEMCPY, 3, 5),
	CUDA("cuMemcpy", PROBE_MEMCPY, FQ_K_MEMCPY, 3, 0),
	CUDA("cuMemcpyAsync", PROBE_MEMCPY, FQ_K_MEMCPY, 3, 4),
	CUDA("cuMemcpyHtoD_v2", PROBE_MEMCPY, FQ_K_MEMCPY, 3, 0),
	CUDA("cuMemcpyDtoH_v2", PROBE_MEMCPY, FQ_K_MEMCPY, 3, 0),
	CUDA("cuMemcpyDtoD_v2", PROBE_MEMCPY, FQ_K_MEMCPY, 3, 0),
	CUDA("cuMemcpyHtoDAsync_v2", PROBE_MEMCPY, FQ_K_MEMCPY, 3, 4),
	CUDA("cuMemcpyDtoHAsync_v2", PROBE_MEMCPY, FQ_K_MEMCPY, 3, 4),
	CUDA("cuMemcpyDtoDAsync_v2", PROBE_MEMCPY, FQ_K_MEMCPY, 3, 4),

	CUDA("cudaMalloc", PROBE_MALLOC, FQ_K_MALLOC, 2, 0),
	CUDA("cudaMallocAsync", PROBE_MALLOC, FQ_K_MALLOC, 2, 3),
	CUDA("cuMemAlloc_v2", PROBE_MALLOC, FQ_K_MALLOC, 2, 0),
	CUDA("cuMemAllocAsync", PROBE_MALLOC, FQ_K_MALLOC, 2, 3),
	CUDA("cudaFree", PROBE_MALLOC, FQ_K_FREE, 0, 0),
	CUDA("cudaFreeAsync", PROBE_MALLOC, FQ_K_FREE, 0, 2),
	CUDA("cuMemFree_v2", PROBE_MALLOC, FQ_K_FREE, 0, 0),
	CUDA("cuMemFreeAsync", PROBE_MALLOC, FQ_K_FREE, 0, 2),
};
const size_t probe_nfns = sizeof(probe_fns) / sizeof(probe_fns[0]);

_Static_assert(sizeof(probe_fns) / sizeof(probe_fns[0]) <= 256, "function id is 8 bits");
_Static_assert(FQ_K_GROUP_END <= 0xf, "kind is 4 bits");

uint64_t probe_cookie(size_t i)
{
	const struct probe_fn *f = &probe_fns[i];

	return (uint64_t)i | (uint64_t)(f->kind & 0xf) << 8 |
	       (uint64_t)(f->comm & 0xf) << FQ_CK_COMM | (uint64_t)(f->count & 0xf) << FQ_CK_COUNT |
	       (uint64_t)(f->dtype & 0xf) << FQ_CK_DTYPE |
	       (uint64_t)(f->redop & 0xf) << FQ_CK_REDOP | (uint64_t)(f->peer & 0xf) << FQ_CK_PEER |
	       (uint64_t)(f->stream & 0xf) << FQ_CK_STREAM;
}

static const struct {
	const char *name;
	unsigned int bit;
} set_names[] = {
	{ "nccl", PROBE_NCCL },	    { "sync", PROBE_SYNC }, { "launch", PROBE_LAUNCH },
	{ "memcpy", PROBE_MEMCPY }, { "malloc", PROBE_MALLOC }, { "sched", PROBE_SCHED },
	{ "tcp", PROBE_TCP },	    { "proc", PROBE_PROC },
};

int probe_parse_sets(const char *list, unsigned int *mask, char **cause)
{
	char *copy = strdup(list ? list : PROBE_DEFAULT), *save = NULL, *w;
	int err = 0;

	if (!copy)
		return -ENOMEM;
	*mask = 0;
	for (w = strtok_r(copy, ", ", &save); w; w = strtok_r(NULL, ", ", &save)) {
		size_t i;

		if (!strncmp(w, "lib:", 4))
			continue; /* library files to attach at start: trace.c */
		for (i = 0; i < sizeof(set_names) / sizeof(set_names[0]); i++)
			if (!strcmp(w, set_names[i].name))
				break;
		if (i == sizeof(set_names) / sizeof(set_names[0])) {
			if (asprintf(cause,
				     "unknown probe set '%s' (use nccl,sync,launch,memcpy,malloc,"
				     "sched,tcp,proc or lib:PATH)", w) < 0)
				*cause = NULL;
			err = -EINVAL;
			goto cleanup;
		}
		*mask |= set_names[i].bit;
	}
cleanup:
	free(copy);
	return err;
}

/* Virtual address -> file offset through the PT_LOAD segment holding it. */
static int vaddr_to_offset(Elf *elf, uint64_t va, uint64_t *off)
{
	size_t n, i;

	if (elf_getphdrnum(elf, &n))
		return -EINVAL;
	for (i = 0; i < n; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD)
			continue;
		if (va >= ph.p_vaddr && va < ph.p_vaddr + ph.p_filesz) {
			*off = va - ph.p_vaddr + ph.p_offset;
			return 0;
		}
	}
	return -ENOENT;
}

int probe_resolve(const char *path, unsigned int mask, struct probe_sym **out, char **cause)
{
	struct probe_sym *syms = NULL;
	uint64_t *addrs = NULL;
	Elf_Scn *scn = NULL;
	Elf *elf = NULL;
	int fd, n = 0, err = 0;
	size_t i;

	*out = NULL;
	elf_version(EV_CURRENT);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		err = -errno;
		if (asprintf(cause, "cannot open '%s': %s", path, strerror(errno)) < 0)
			*cause = NULL;
		return err;
	}
	syms = calloc(probe_nfns, sizeof(*syms));
	addrs = calloc(probe_nfns, sizeof(*addrs));
	elf = elf_begin(fd, ELF_C_READ, NULL);
	if (!syms || !addrs || !elf || elf_kind(elf) != ELF_K_ELF) {
		err = syms && addrs ? -ENOEXEC : -ENOMEM;
		if (asprintf(cause, "cannot read '%s' as ELF: %s", path, elf_errmsg(-1)) < 0)
			*cause = NULL;
		goto cleanup;
	}
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		Elf_Data *data;
		size_t j, nsym;

		if (!gelf_getshdr(scn, &sh) ||
		    (sh.sh_type != SHT_DYNSYM && sh.sh_type != SHT_SYMTAB))
			continue;
		data = elf_getdata(scn, NULL);
		if (!data || !sh.sh_entsize)
			continue;
		nsym = sh.sh_size / sh.sh_entsize;
		for (j = 0; j < nsym; j++) {
			GElf_Sym s;
			const char *name;
			uint64_t off;
			int k;

			if (!gelf_getsym(data, (int)j, &s) || GELF_ST_TYPE(s.st_info) != STT_FUNC ||
			    s.st_shndx == SHN_UNDEF || !s.st_value)
				continue;
			name = elf_strptr(elf, sh.sh_link, s.st_name);
			if (!name || (name[0] != 'n' && name[0] != 'c' && name[0] != 'f'))
				continue;
			for (i = 1; i < probe_nfns; i++)
				if ((probe_fns[i].set & mask) && !strcmp(name, probe_fns[i].name))
					break;
			if (i == probe_nfns)
				continue;
			/* ncclX and pncclX (or .dynsym and .symtab) share an address: once */
			for (k = 0; k < n; k++)
				if (addrs[k] == s.st_value || syms[k].fn == i)
					break;
			if (k < n || vaddr_to_offset(elf, s.st_value, &off))
				continue;
			addrs[n] = s.st_value;
			syms[n].fn = i;
			syms[n].offset = off;
			n++;
		}
	}
	*out = syms;
	syms = NULL;
	err = n;
cleanup:
	if (elf)
		elf_end(elf);
	close(fd);
	free(syms);
	free(addrs);
	return err;
}

static const char *const dtypes[] = { "int8", "uint8", "int32", "uint32", "int64", "uint64",
				      "float16", "float32", "float64", "bfloat16", "float8e4m3",
				      "float8e5m2" };
static const int dsizes[] = { 1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1 };
static const char *const redops[] = { "sum", "prod", "max", "min", "avg" };

const char *probe_nccl_dtype(int dt)
{
	return dt >= 0 && dt < (int)(sizeof(dtypes) / sizeof(dtypes[0])) ? dtypes[dt] : NULL;
}

int probe_nccl_dtype_size(int dt)
{
	return dt >= 0 && dt < (int)(sizeof(dsizes) / sizeof(dsizes[0])) ? dsizes[dt] : 0;
}

const char *probe_nccl_redop(int op)
{
	if (op < 0)
		return NULL;
	if (op < (int)(sizeof(redops) / sizeof(redops[0])))
		return redops[op];
	return "custom"; /* ncclRedOpCreatePreMulSum and friends */
}

/*
 * Two calibration targets whose first instruction we know: uprobes emulate `push`, and
 * single-step most others (endbr64 here), which is the cost that matters on glibc-like code.
 */
__asm__(".text\n"
	".globl probe_calib_push\n"
	".type probe_calib_push, @function\n"
	"probe_calib_push:\n"
	"	push %rbp\n"
	"	mov %rsp, %rbp\n"
	"	lea 1(%rdi), %eax\n"
	"	pop %rbp\n"
	"	ret\n"
	".size probe_calib_push, .-probe_calib_push\n"
	".globl probe_calib_endbr\n"
	".type probe_calib_endbr, @function\n"
	"probe_calib_endbr:\n"
	"	.byte 0xf3, 0x0f, 0x1e, 0xfa\n" /* endbr64 */
	"	push %rbp\n"
	"	mov %rsp, %rbp\n"
	"	lea 1(%rdi), %eax\n"
	"	pop %rbp\n"
	"	ret\n"
	".size probe_calib_endbr, .-probe_calib_endbr\n");

int probe_self_offset(const void *fn, char *path, size_t n, uint64_t *offset)
{
	uintptr_t a = (uintptr_t)fn;
	char line[4096];
	FILE *f = fopen("/proc/self/maps", "re");
	int err = -ENOENT;

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi, off;
		int pos = 0;

		if (sscanf(line, "%lx-%lx %*s %lx %*s %*s%n", &lo, &hi, &off, &pos) < 3)
			continue;
		if (a < lo || a >= hi)
			continue;
		while (line[pos] == ' ')
			pos++;
		line[strcspn(line, "\n")] = 0;
		if (line[pos] != '/')
			break;
		snprintf(path, n, "%s", line + pos);
		*offset = a - lo + off;
		err = 0;
		break;
	}
	fclose(f);
	return err;
}
