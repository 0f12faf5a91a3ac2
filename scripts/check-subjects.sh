#!/usr/bin/env bash
# Fails when a commit subject is 72 characters or longer: the history is
# scanned by its subjects, the details go in the body. Commits from
# c13abab on are checked (the rule holds from there; older subjects are
# history). A clone without that commit (shallow) fails: it cannot check.
set -euo pipefail
cd "$(dirname "$0")/.."
base=c13ababe9100a8c84783f52de9ecb7ed8966e242
git rev-parse -q --verify "$base^{commit}" >/dev/null ||
	{ echo "check-subjects: commit c13abab is not in this clone (shallow?): cannot check the subjects after it" >&2; exit 1; }
long=$(git log --format='%h %s' "$base..HEAD" | awk 'length($0) - length($1) - 1 >= 72')
if [[ -n $long ]]; then
	echo "check-subjects: subjects of 72 characters or more (put the details in the body):" >&2
	echo "$long" >&2
	exit 1
fi
