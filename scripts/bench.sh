#!/usr/bin/env bash
# make bench: what rdma-chain costs a node, measured against the upstream
# plugins `make deps` installs (.tools/cni/bin), paired and interleaved in one
# run. Prints one markdown table and writes it to .cache/bench.md (ignored).
# Root only (netns, veth). Environment:
#   RDMA_CHAIN_BIN    plugin under test (default bin/rdma-chain)
#   RC_BENCH_SAMPLES  paired samples per process-level measure (default 60)
#   RC_BENCH_ONLY     names of the benchmarks to run, e.g. "Process AddRecords AddDelDevices"
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export PATH="/usr/local/go/bin:$PATH"
export RDMA_CHAIN_BIN="${RDMA_CHAIN_BIN:-$root/bin/rdma-chain}"
export RDMA_CHAIN_TOOLS="${RDMA_CHAIN_TOOLS:-$root/.tools}"
# The benchmarks are privileged cases (testenv.Privileged): they run as root only.
export RC_PRIVILEGED=1

if [[ $(id -u) -ne 0 ]]; then
	echo "bench: needs root (network namespaces, veth)" >&2
	exit 1
fi
for f in "$RDMA_CHAIN_BIN" "$RDMA_CHAIN_TOOLS/cni/bin/tuning" "$RDMA_CHAIN_TOOLS/bin/cnitool"; do
	[[ -x $f ]] || { echo "bench: $f missing: run make deps build" >&2; exit 1; }
done

work=$root/.cache/bench
mkdir -p "$work"
rows=$work/rows.md
out=$root/.cache/bench.md
: >"$rows"
# One benchmark at a time, in the table's order; each pairs and interleaves
# its own measures.
started=$(date -u +%FT%TZ)
load=$(cut -d' ' -f1-3 /proc/loadavg)
benches=${RC_BENCH_ONLY:-Process PodResourcesLookup PodCycleCnitool NetdevModes ConcurrentPassThrough AddRecords AddDelDevices Scrape}

go test -c -o "$work/netns.test" ./integration/netns
: >"$work/bench.log"
for name in $benches; do
	echo "bench: $name" >&2
	pkg=
	case $name in
	AddRecords | AddDelDevices) pkg=./pkg/chain ;;
	Scrape) pkg=./pkg/metrics ;; # reconcile's /metrics
	esac
	if [[ -n $pkg ]]; then
		RC_BENCH_OUT=$rows go test -v -run '^$' -bench "^Benchmark$name\$" -benchtime=1x "$pkg" \
			>>"$work/bench.log" 2>&1 || { cat "$work/bench.log" >&2; exit 1; }
		continue
	fi
	(cd integration/netns && RC_BENCH_OUT=$rows "$work/netns.test" -test.run '^$' -test.timeout 30m \
		-test.v -test.bench "^Benchmark$name\$" -test.benchtime=1x >>"$work/bench.log" 2>&1) ||
		{ cat "$work/bench.log" >&2; exit 1; }
done

# A benchmark that skipped (a missing upstream binary, no netns support)
# would leave its rows out of the table without a word: that fails the run.
if grep -q -- '--- SKIP' "$work/bench.log"; then
	grep -B1 -A3 -- '--- SKIP' "$work/bench.log" >&2
	echo "bench: a benchmark skipped; its rows would be missing from the table" >&2
	exit 1
fi

model=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
{
	echo "tree $(git describe --tags --always --dirty 2>/dev/null || echo dev), binary $RDMA_CHAIN_BIN, $started;" \
		"machine: $(nproc) CPUs, ${model:-unknown CPU}, Linux $(uname -r), load average at start $load"
	echo
	echo "| measure | median | p95 | baseline (median) | ratio | target | verdict | note |"
	echo "|---|---|---|---|---|---|---|---|"
	cat "$rows"
	echo
	echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$out"
cat "$out"
