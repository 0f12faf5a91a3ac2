package config

import (
	"math/rand"
	"regexp"
	"testing"
)

// TestShapesMatchTheirExpressions checks that each shape matches exactly
// what the regular expression it stands for (with the length range)
// matches: random strings over an alphabet of every character class the
// shapes distinguish, plus the corner cases.
func TestShapesMatchTheirExpressions(t *testing.T) {
	shapes := []struct {
		name string
		s    shape
		expr string
	}{
		{"devName", devNameRE, `^[A-Za-z0-9_][A-Za-z0-9_.:-]*$`},
		{"ifPrefix", ifPrefixRE, `^[A-Za-z0-9_-]+$`},
		{"deviceID", deviceIDRE, `^[A-Za-z0-9_][A-Za-z0-9_.:-]*(/[A-Za-z0-9_-]+)?$`},
		{"pluginName", pluginNameRE, `^[A-Za-z0-9][A-Za-z0-9_.-]*$`},
		{"networkName", networkNameRE, `^[A-Za-z0-9][A-Za-z0-9_.-]*$`},
		{"resourceDomain", resourceDomainRE, `^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$`},
		{"resourceName", resourceNameRE, `^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$`},
		{"pnet", pnetRE, `^[A-Za-z0-9]+$`},
		{"ueid", ueidRE, `^[A-Za-z0-9][A-Za-z0-9.-]*$`},
		{"dns", dnsRE, `^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$`},
		{"uid", uidRE, `^[A-Za-z0-9-]+$`},
	}
	const alphabet = "aZ09_.:-/ \x00\xc3\xa9\n@A"
	rng := rand.New(rand.NewSource(1))
	corner := []string{"", "a", "-", ".", "_", "a/", "/a", "a/b", "a/b/c", "a.", ".a", "a-", "-a", "A", "é", "a\n"}
	for _, tc := range shapes {
		re := regexp.MustCompile(tc.expr)
		want := func(s string) bool { return len(s) >= tc.s.min && len(s) <= tc.s.max && re.MatchString(s) }
		inputs := append([]string(nil), corner...)
		for i := 0; i < 20000; i++ {
			n := rng.Intn(8)
			if i%100 == 0 {
				n = tc.s.max - 2 + rng.Intn(4)
			}
			b := make([]byte, n)
			for j := range b {
				b[j] = alphabet[rng.Intn(len(alphabet))]
			}
			inputs = append(inputs, string(b))
		}
		matched := 0
		for _, in := range inputs {
			if got := tc.s.MatchString(in); got != want(in) {
				t.Fatalf("%s.MatchString(%q) = %v, %s says %v", tc.name, in, got, tc.expr, !got)
			} else if got {
				matched++
			}
		}
		if matched < 100 {
			t.Errorf("%s: only %d of %d inputs matched; the comparison proves little", tc.name, matched, len(inputs))
		}
	}
}
