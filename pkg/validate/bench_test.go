package validate

import (
	"fmt"
	"strings"
	"testing"
)

// unknownKeys is a conflist whose rdma-chain entry holds n unknown keys,
// on one line as a generator would write it.
func unknownKeys(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"ptp"},{"type":"rdma-chain"`)
	for i := range n {
		fmt.Fprintf(&b, `,"zz%07d":1`, i)
	}
	b.WriteString(`}]}`)
	return []byte(b.String())
}

// benchKeys is how many unknown keys BenchmarkUnknownKeys's conflist has.
var benchKeys = 300_000

// BenchmarkUnknownKeys validates and formats every problem of a conflist
// with benchKeys unknown keys, as the validate command does.
func BenchmarkUnknownKeys(b *testing.B) {
	data := unknownKeys(benchKeys)
	for b.Loop() {
		probs := Conflist(data, "")
		lines := FormatAll("f", data, probs)
		if len(lines) < benchKeys {
			b.Fatalf("%d problems, want 300000", len(lines))
		}
	}
}
