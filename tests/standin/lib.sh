# SPDX-License-Identifier: MIT
# Shared by the standin tests: tests/lib.sh's scratch folder and one-line failures, with
# the workload's stderr; and readers of fq-workload's report.
. "$(dirname "$0")/../lib.sh"
set -eu
: "${FQ_WORKLOAD:?set by ctest: path to fq-workload}"
: "${STANDIN_DIR:?set by ctest: folder holding the stand-in libraries}"
scratch fq-standin

fail_logs() {
	if [ -s "$T/err" ]; then
		echo "--- workload stderr:" >&2
		tail -n 30 "$T/err" >&2
	fi
}

# ops_per_rank FILE OP: "rank count" lines, one per rank that called OP
ops_per_rank() {
	awk -F'\t' -v op="$2" 'NR > 1 && $4 == op { n[$1]++ } END { for (r in n) print r, n[r] }' \
		"$1" | sort -n
}

# sync_wait FILE RANK: total ns the rank spent in cudaStreamSynchronize
sync_wait() {
	awk -F'\t' -v r="$2" 'NR > 1 && $1 == r && $4 == "cudaStreamSynchronize" { s += $7 }
		END { printf "%d\n", s }' "$1"
}

# the communicator's shared-memory segment must be gone after the job
check_shm_gone() {
	uid=$(awk -F'\t' '$4 == "ncclCommInitRank" { print substr($8, 1, 32); exit }' "$1")
	[ -n "$uid" ] || fail "no ncclCommInitRank row in the report"
	[ ! -e "/dev/shm/fq-standin-$uid" ] || fail "shared memory fq-standin-$uid was left behind"
}
