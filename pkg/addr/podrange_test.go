package addr

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestPodRange(t *testing.T) {
	block := netip.MustParsePrefix("::f:0:c00/124")
	for _, tt := range []struct {
		name    string
		addrs   []string
		want    string
		wantErr string
	}{
		{"one /64", []string{"2408:4000:1:2::5/64"}, "2408:4000:1:2:0:f:0:c00/124", ""},
		{"ULA and link-local", []string{"fe80::1/64", "fd00:79::1/64"}, "fd00:79::f:0:c00/124", ""},
		{"two addresses of one /64", []string{"fd00:79::1/64", "fd00:79::2/64"}, "fd00:79::f:0:c00/124", ""},
		{"a shorter on-link prefix", []string{"fd00:79::1/48"}, "fd00:79::f:0:c00/124", ""},
		{"only a /128", []string{"fd00:79::1/128"}, "", "no global"},
		{"only link-local and IPv4", []string{"fe80::1/64", "192.0.2.1/24"}, "", "no global"},
		{"none", nil, "", "no global"},
		{"two /64s", []string{"fd00:79::1/64", "fd00:80::1/64"}, "", "ambiguous"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var addrs []netip.Prefix
			for _, a := range tt.addrs {
				addrs = append(addrs, netip.MustParsePrefix(a))
			}
			got, err := PodRange(addrs, block)
			switch {
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("PodRange = %v, %v; want error %q", got, err, tt.wantErr)
			case tt.wantErr == "" && err != nil:
				t.Fatalf("PodRange: %v", err)
			case tt.wantErr == "" && got.String() != tt.want:
				t.Errorf("PodRange = %s, want %s", got, tt.want)
			case tt.wantErr == "no global" && !errors.Is(err, ErrNoGlobal64):
				t.Errorf("error %v is not ErrNoGlobal64", err)
			}
		})
	}
}
