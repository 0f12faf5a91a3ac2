#!/usr/bin/env bash
# Fails when a commit subject is 72 characters or longer: the history is
# scanned by its subjects, the details go in the body. Commits after
# c13abab (the last subject of 72) are checked; older subjects are
# history. A clone without that commit (shallow) fails: it cannot check.
set -euo pipefail
cd "$(dirname "$0")/.."
base=c13ababe9100a8c84783f52de9ecb7ed8966e242
git rev-parse -q --verify "$base^{commit}" >/dev/null ||
	{ echo "check-subjects: commit c13abab is not in this clone (shallow?): cannot check the subjects after it" >&2; exit 1; }
# Characters, not bytes: an em dash is one.
export LC_ALL=C.UTF-8
long=
while IFS= read -r line; do
	subject=${line#* }
	if ((${#subject} >= 72)); then
		long+="$line"$'\n'
	fi
done < <(git log --format='%h %s' "$base..HEAD")
if [[ -n $long ]]; then
	echo "check-subjects: subjects of 72 characters or more (put the details in the body):" >&2
	printf '%s' "$long" >&2
	exit 1
fi
