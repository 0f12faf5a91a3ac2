package rdma

import (
	"math/rand"
	"regexp"
	"testing"
)

// TestPCIAddrMatchesExpression checks that pciAddr accepts exactly what
// the expression it stands for accepts.
func TestPCIAddrMatchesExpression(t *testing.T) {
	re := regexp.MustCompile(`^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)
	inputs := []string{"0000:3b:00.0", "10000:3b:00.7", "0000:3b:00.8", "000:3b:00.0", "0000:3B:00.0",
		"0000:3b:000.0", "0000:3b:00.", "0000:3b:00.01", "0000:3b:00:0", "0000:3b.00.0", "", "mlx5_0", "0000:3b:00.0 "}
	rng := rand.New(rand.NewSource(1))
	const alphabet = "0af9:.:.7g8"
	for i := 0; i < 50000; i++ {
		b := []byte("0000:3b:00.0")
		for j := rng.Intn(3); j >= 0; j-- {
			b[rng.Intn(len(b))] = alphabet[rng.Intn(len(alphabet))]
		}
		if rng.Intn(4) == 0 {
			b = append([]byte("a"), b...)
		}
		inputs = append(inputs, string(b))
	}
	matched := 0
	for _, in := range inputs {
		if got, want := pciAddr(in), re.MatchString(in); got != want {
			t.Fatalf("pciAddr(%q) = %v, want %v", in, got, want)
		} else if got {
			matched++
		}
	}
	if matched < 1000 {
		t.Errorf("only %d inputs matched", matched)
	}
}
