package rdma

import (
	"strings"
	"testing"
)

func TestSoftRoCEUnsupported(t *testing.T) {
	cases := []struct {
		release string
		want    string // "" when served, else a word of the reason
	}{
		{"7.3.4+deb13-amd64", ""},
		{"7.1.0", ""},
		{"7.10-rc1", ""},
		{"8.0.0", ""},
		{"7.0.12-amd64", "only from Linux 7.1"},
		{"6.12.41+deb12-amd64", "only from Linux 7.1"},
		{"6.1.0-56-amd64", "only from Linux 7.1"},
		{"", "does not parse"},
		{"seven.three", "does not parse"},
		{"7", "does not parse"},
		{"7.x", "does not parse"},
	}
	for _, tc := range cases {
		t.Run(tc.release, func(t *testing.T) {
			got := SoftRoCEUnsupported(tc.release)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("SoftRoCEUnsupported(%q) = %q, want %q", tc.release, got, tc.want)
			}
		})
	}
}

func TestSoftRoCEName(t *testing.T) {
	a := SoftRoCEName("rdmanet", "c1", "eth0")
	cases := []struct {
		name  string
		other string
		same  bool
	}{
		{"same attachment", SoftRoCEName("rdmanet", "c1", "eth0"), true},
		{"other container", SoftRoCEName("rdmanet", "c2", "eth0"), false},
		{"other interface", SoftRoCEName("rdmanet", "c1", "net1"), false},
		{"other network", SoftRoCEName("rdmanet2", "c1", "eth0"), false},
		{"joined differently", SoftRoCEName("rdmanet/c1", "", "eth0"), false},
	}
	if len(a) != 16 || !strings.HasPrefix(a, "rxe_") || strings.Trim(a[4:], "0123456789abcdef") != "" {
		t.Fatalf("name %q: want rxe_ and 12 lower-case hex digits", a)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if (tc.other == a) != tc.same {
				t.Errorf("%q vs %q: same=%v, want %v", tc.other, a, tc.other == a, tc.same)
			}
		})
	}
}

func TestIsSoftRoCEName(t *testing.T) {
	for name, want := range map[string]bool{
		SoftRoCEName("rdmanet", "c1", "eth0"): true,
		"rxe_0123456789ab":                    true,
		"rxe_0123456789AB":                    false,
		"rxe_0123456789a":                     false,
		"rxe_0123456789abc":                   false,
		"rxe_0123456789ag":                    false,
		"rxe0":                                false,
		"siw_0123456789ab":                    false,
		"":                                    false,
	} {
		if got := IsSoftRoCEName(name); got != want {
			t.Errorf("IsSoftRoCEName(%q) = %v, want %v", name, got, want)
		}
	}
}
