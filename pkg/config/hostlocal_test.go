package config

import "testing"

func TestHostLocalDataDir(t *testing.T) {
	for _, tc := range []struct {
		ipam, want string
	}{
		{``, ""},
		{`,"ipam":{"type":"dhcp"}`, ""},
		{`,"ipam":{"type":"host-local","ranges":[[{"subnet":"fd00:77::/64"}]]}`, "/var/lib/cni/networks"},
		{`,"ipam":{"type":"host-local","dataDir":"/run/ipam6/","ranges":[[{"subnet":"fd00:77::/64"}]]}`, "/run/ipam6"},
		// host-local's encoding/json matches keys case-insensitively.
		{`,"ipam":{"type":"host-local","DATADIR":"/srv/leases","ranges":[[{"subnet":"fd00:77::/64"}]]}`, "/srv/leases"},
	} {
		conf, _, err := Parse([]byte(`{"cniVersion":"1.1.0","name":"n","type":"rdma-chain","mode":"shared"` + tc.ipam + `}`))
		if err != nil {
			t.Fatalf("%s: %v", tc.ipam, err)
		}
		if got := conf.HostLocalDataDir(); got != tc.want {
			t.Errorf("%s: HostLocalDataDir() = %q, want %q", tc.ipam, got, tc.want)
		}
	}
}
