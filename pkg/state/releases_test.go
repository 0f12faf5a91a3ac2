package state

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// TestReleases checks that every release in docs/releases.md is a semver
// tag naming a commit of this history, and this tree reads every record
// schema a release wrote.
func TestReleases(t *testing.T) {
	rels, err := testenv.Releases()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("git"); err != nil {
		testenv.Unavailable(t, "git: %v", err)
	}
	semver := regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`)
	hash := regexp.MustCompile(`^[0-9a-f]{40}$`)
	root := testenv.RepoRoot()
	for _, r := range rels {
		if !semver.MatchString(r.Version) {
			t.Errorf("%s: not a vMAJOR.MINOR.PATCH version", r.Version)
		}
		if !hash.MatchString(r.Commit) {
			t.Errorf("%s: commit %q is not a full hash", r.Version, r.Commit)
		}
		if r.Schema < 1 || r.Schema > Version {
			t.Errorf("%s wrote record schema %d; this tree reads 1..%d", r.Version, r.Schema, Version)
		}
		git := func(args ...string) (string, error) {
			out, err := exec.Command("git", append([]string{"-C", root}, args...)...).Output()
			return strings.TrimSpace(string(out)), err
		}
		if _, err := git("cat-file", "-e", r.Commit+"^{commit}"); err != nil {
			t.Errorf("%s: commit %s is not in this clone's history", r.Version, r.Commit)
		}
		// A clone may lack tags; one it has must name the listed commit.
		if tagged, err := git("rev-parse", "-q", "--verify", "refs/tags/"+r.Version+"^{commit}"); err == nil && tagged != r.Commit {
			t.Errorf("tag %s names %s, docs/releases.md says %s", r.Version, tagged, r.Commit)
		}
	}
}
