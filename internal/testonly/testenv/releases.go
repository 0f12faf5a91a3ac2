package testenv

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Release is one row of docs/releases.md.
type Release struct {
	Version string // vMAJOR.MINOR.PATCH
	Commit  string // the full commit the tag names
	Schema  int    // the record schema (state.Version) that release writes
}

// Releases reads docs/releases.md's table, oldest first, as written there.
func Releases() ([]Release, error) {
	path := filepath.Join(RepoRoot(), "docs", "releases.md")
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Release
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cells := strings.Split(strings.Trim(sc.Text(), "| "), " | ")
		if len(cells) != 5 || len(cells[0]) < 2 || cells[0][0] != 'v' || cells[0][1] < '0' || cells[0][1] > '9' {
			continue // not a release row (prose, the header, its rule)
		}
		schema, err := strconv.Atoi(cells[3])
		if err != nil {
			return nil, fmt.Errorf("%s: %s: record schema %q: %w", path, cells[0], cells[3], err)
		}
		out = append(out, Release{Version: cells[0], Commit: cells[1], Schema: schema})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no release rows", path)
	}
	return out, nil
}
