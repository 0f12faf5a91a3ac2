package rdma

import (
	"net"
	"testing"
)

func TestGUIDFromMAC(t *testing.T) {
	tests := []struct {
		name    string
		mac     net.HardwareAddr
		want    string
		wantErr bool
	}{
		{"eRDMA ENI MAC", net.HardwareAddr{0x00, 0x16, 0x3e, 0x01, 0x02, 0x03}, "0216:3eff:fe01:0203", false},
		{"locally administered bit set", net.HardwareAddr{0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee}, "00aa:bbff:fecc:ddee", false},
		{"all ones", net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, "fdff:ffff:feff:ffff", false},
		{"empty", nil, "", true},
		{"EUI-64 input", net.HardwareAddr{1, 2, 3, 4, 5, 6, 7, 8}, "", true},
		{"IPoIB 20 bytes", make(net.HardwareAddr, 20), "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := GUIDFromMAC(tt.mac)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("GUIDFromMAC(%v) = %q, %v; want %q, err=%v", tt.mac, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestMACFromGUID(t *testing.T) {
	tests := []struct {
		name    string
		guid    string
		want    string
		wantErr bool
	}{
		{"eRDMA node_guid", "0216:3eff:fe01:0203", "00:16:3e:01:02:03", false},
		{"upper case with newline", "0216:3EFF:FE01:0203\n", "00:16:3e:01:02:03", false},
		{"locally administered", "00aa:bbff:fecc:ddee", "02:aa:bb:cc:dd:ee", false},
		{"middle not ff:fe", "0216:3e00:0001:0203", "", true},
		{"mlx style GUID", "b859:9f03:00d4:6a80", "", true},
		{"three groups", "0216:3eff:fe01", "", true},
		{"five groups", "0216:3eff:fe01:0203:0405", "", true},
		{"short group", "216:3eff:fe01:0203", "", true},
		{"not hex", "0216:3eff:fe01:02zz", "", true},
		{"colon bytes", "02:16:3e:ff:fe:01:02:03", "", true},
		{"empty", "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := MACFromGUID(tt.guid)
			if (err != nil) != tt.wantErr {
				t.Fatalf("MACFromGUID(%q) err = %v, wantErr %v", tt.guid, err, tt.wantErr)
			}
			if !tt.wantErr && got.String() != tt.want {
				t.Fatalf("MACFromGUID(%q) = %s, want %s", tt.guid, got, tt.want)
			}
		})
	}
}

func TestGUIDRoundTrip(t *testing.T) {
	for _, s := range []string{"00:16:3e:01:02:03", "02:00:00:00:00:01", "fe:dc:ba:98:76:54"} {
		mac, _ := net.ParseMAC(s)
		g, err := GUIDFromMAC(mac)
		if err != nil {
			t.Fatal(err)
		}
		back, err := MACFromGUID(g)
		if err != nil || back.String() != s {
			t.Fatalf("%s → %s → %v, %v", s, g, back, err)
		}
	}
}

func TestGUIDFromNetlink(t *testing.T) {
	tests := []struct{ in, want string }{
		{"03:02:01:fe:ff:3e:16:02", "0216:3eff:fe01:0203"},
		{"80:6a:d4:00:03:9f:59:b8", "b859:9f03:00d4:6a80"},
		{"", ""},
		{"00:16:3e:01:02:03", ""},
	}
	for _, tt := range tests {
		if got := guidFromNetlink(tt.in); got != tt.want {
			t.Errorf("guidFromNetlink(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
