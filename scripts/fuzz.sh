#!/usr/bin/env bash
# Runs every Fuzz target of the module for FUZZTIME each (go test's
# -fuzztime: a count, default 20000x, or a duration such as 5m), starting
# from the seed corpus checked in under each package's testdata/fuzz/. A
# target that finds a failure fails the run; go test writes the failing
# input under testdata/fuzz/ for the developer to commit.
#
# The default is a count because Go 1.26's fuzzer can end a run given a
# duration with only "context deadline exceeded" (go.dev/issue/75804,
# fixed in Go 1.27): its coordinator misreads its own deadline, most often
# while a worker is minimizing a new input, which -fuzzminimizetime's
# default lets run for 60 s. Minimizing is bounded by FUZZMINIMIZETIME
# (default 100x) so that a count ends soon after it is reached.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
FUZZTIME=${FUZZTIME:-20000x}
FUZZMINIMIZETIME=${FUZZMINIMIZETIME:-100x}
# Built the way make builds every test but -race's (Makefile's GO_TEST).
export CGO_ENABLED=0
# fuzz_once fuzzes target $2 of package $1, its output on stdout.
fuzz_once() {
	go test -trimpath -run '^$' -fuzz "^${2}\$" -fuzztime "$FUZZTIME" -fuzzminimizetime "$FUZZMINIMIZETIME" "$1" 2>&1
}
n=0
total_execs=0
# Only the packages whose test files declare a Fuzz function: listing a
# package's tests links its test binary, about a second each for all of them.
fuzzpkgs=$(git ls-files '*_test.go' | xargs grep -l '^func Fuzz[A-Z]' | xargs -n1 dirname | sort -u | sed 's|^|./|')
for pkg in $fuzzpkgs; do
	targets=$(go test -trimpath -list '^Fuzz' "$pkg" | grep '^Fuzz' || true)
	for t in $targets; do
		echo "fuzz: $pkg $t for $FUZZTIME"
		if ! out=$(fuzz_once "$pkg" "$t"); then
			# A finding always writes its input under testdata/fuzz/. Given a
			# duration, Go 1.26's fuzzer can also stop with only "context
			# deadline exceeded" (above): that run is repeated once, and fails
			# the same way if it happens again. Its output is shown indented,
			# so that .ci/run's list of what failed does not take it for a
			# failure.
			if echo "$out" | grep -q 'Failing input written' || ! echo "$out" | grep -q 'context deadline exceeded'; then
				echo "$out"
				exit 1
			fi
			echo "$out" | sed 's/^/fuzz:   | /'
			echo "fuzz: $t stopped without a finding (context deadline exceeded): running it again"
			out=$(fuzz_once "$pkg" "$t") || { echo "$out"; exit 1; }
		fi
		execs=$(echo "$out" | sed -n 's/.*execs: \([0-9]*\) .*/\1/p' | tail -1)
		echo "fuzz: $t ok, ${execs:-?} execs"
		total_execs=$((total_execs + ${execs:-0}))
		n=$((n + 1))
	done
done
[ "$n" -gt 0 ] || { echo "fuzz: no Fuzz targets found" >&2; exit 1; }
echo "fuzz: $n targets, $total_execs execs in all"
