#!/usr/bin/env bash
# Regenerates the committed generated files (the SMC socket hook's BPF
# object and its Go bindings, built with Debian's clang through bpf2go) and
# fails when that changes anything: the committed files are what the source
# builds to.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
for t in clang llvm-strip; do
	command -v "$t" >/dev/null || { echo "check-generated: $t missing (make deps-lint installs clang, llvm, libbpf-dev)" >&2; exit 1; }
done
[ -f /usr/include/bpf/bpf_helpers.h ] || { echo "check-generated: libbpf-dev missing" >&2; exit 1; }
go generate ./pkg/smc/hook/
if ! git diff --exit-code --stat -- pkg/smc/hook/; then
	echo "check-generated: regenerating pkg/smc/hook changed the committed files (run go generate ./pkg/smc/hook/ and commit)" >&2
	exit 1
fi
if [ -n "$(git status --porcelain --untracked-files=all -- pkg/smc/hook/)" ]; then
	git status --porcelain --untracked-files=all -- pkg/smc/hook/ >&2
	echo "check-generated: regenerating pkg/smc/hook left files that are not committed" >&2
	exit 1
fi
echo "check-generated: pkg/smc/hook is what its source builds to"
