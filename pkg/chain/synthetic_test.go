package chain

import (
	"regexp"
	"testing"
)

// TestSyntheticMatchesExpression checks that synthetic accepts exactly
// what ^(eni-)?[0-9]+$ accepts.
func TestSyntheticMatchesExpression(t *testing.T) {
	re := regexp.MustCompile(`^(eni-)?[0-9]+$`)
	for _, in := range []string{"", "0", "17", "eni-3", "eni-", "eni-eni-3", "eni-3a", "3a", "-3", "ENI-3",
		"eni3", " 3", "erdma_0", "eni-0123456789", "٣"} {
		if got, want := synthetic(in), re.MatchString(in); got != want {
			t.Errorf("synthetic(%q) = %v, want %v", in, got, want)
		}
	}
}
