package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		nil, {"state"}, {"attach", "/sys/fs/bpf/x"}, {"state", "pins"}, {"state", "/sys/fs/bpf/../x"},
		{"state", "/sys/fs/bpf/x", "1"}, {"add", "/sys/fs/bpf/x"}, {"add", "/sys/fs/bpf/x", "0"},
		{"remove", "/sys/fs/bpf/x", "4294967296"}, {"listed", "/sys/fs/bpf/x", "-1"}, {"listed", "/sys/fs/bpf/x", "1", "2"},
	} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 2 || !strings.Contains(errb.String(), "usage:") || out.Len() != 0 {
			t.Errorf("run(%q) = %d, stderr %q, stdout %q; want 2 with the usage", args, code, errb.String(), out.String())
		}
	}
}
