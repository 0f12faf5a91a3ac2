package chain

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/podres"
)

const (
	uidA = "0b7e3c2a-1f00-4c1e-9a53-6d7e2f4a9b10"
	uidB = "5d1c0e9f-2a4b-4f6e-8c3d-7e8f9a0b1c2d"
)

// TestClaimCDIName checks how the CDI device kubelet reports for a claim
// device is split into the claim's UID and the spec's device name: only
// pkg/dra's kind, a lower-case UUID, and the claim device's own name.
func TestClaimCDIName(t *testing.T) {
	cases := []struct {
		name    string
		ids     []string
		uid     string // "" with ok false
		wantErr string
	}{
		{name: "the driver's", ids: []string{cdiIDPrefix + uidA + "-mlx5-0"}, uid: uidA},
		{name: "with other kinds", ids: []string{"nvidia.com/gpu=0", cdiIDPrefix + uidA + "-mlx5-0", "rdma-chain.github.io/other=x"}, uid: uidA},
		{name: "twice the same", ids: []string{cdiIDPrefix + uidA + "-mlx5-0", cdiIDPrefix + uidA + "-mlx5-0"}, uid: uidA},
		{name: "none"},
		{name: "only other kinds", ids: []string{"dranet.gke.io/net=" + uidA + "-mlx5-0", "rdma-chain.github.io/rdmax=" + uidA + "-mlx5-0"}},
		{name: "two", ids: []string{cdiIDPrefix + uidA + "-mlx5-0", cdiIDPrefix + uidB + "-mlx5-0"}, wantErr: "two CDI devices"},
		{name: "upper-case UUID", ids: []string{cdiIDPrefix + strings.ToUpper(uidA) + "-mlx5-0"}, wantErr: "is not <claim UID>-mlx5-0"},
		{name: "not a UUID", ids: []string{cdiIDPrefix + "0b7e3c2a-1f00-4c1e-9a53-6d7e2f4a9b1g-mlx5-0"}, wantErr: "is not <claim UID>"},
		{name: "dashes moved", ids: []string{cdiIDPrefix + "0b7e3c2a1-f00-4c1e-9a53-6d7e2f4a9b10-mlx5-0"}, wantErr: "is not <claim UID>"},
		{name: "short", ids: []string{cdiIDPrefix + uidA}, wantErr: "is not <claim UID>"},
		{name: "no device", ids: []string{cdiIDPrefix + uidA + "-"}, wantErr: "is not <claim UID>"},
		{name: "another device", ids: []string{cdiIDPrefix + uidA + "-mlx5-1"}, wantErr: "is not <claim UID>-mlx5-0"},
		{name: "path in the UUID", ids: []string{cdiIDPrefix + "../../../../etc/passwd/aaaaaaaaaaaaaaaaaa-mlx5-0"}, wantErr: "is not <claim UID>"},
		{name: "path after the UUID", ids: []string{cdiIDPrefix + uidA + "/../../x-mlx5-0"}, wantErr: "is not <claim UID>"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := claimDev("a", "mlx5-0")
			d.CDIDevices = tc.ids
			uid, name, ok, err := claimCDIName(d)
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case ok != (tc.uid != "") || uid != tc.uid || ok && name != uid+"-mlx5-0":
				t.Errorf("got %q %q %v, want %q", uid, name, ok, tc.uid)
			}
		})
	}
}

// TestReadCDISpec checks that a spec file is read as untrusted input:
// a regular file only, no symbolic link followed, bounded, strict JSON of
// the driver's kind.
func TestReadCDISpec(t *testing.T) {
	good := `{"cdiVersion":"0.6.0","kind":"rdma-chain.github.io/rdma","devices":[{"name":"` + uidA + `-mlx5-0",` +
		`"annotations":{"rdma-chain.github.io/config":"{}"},"containerEdits":{"env":["A=1"]}}]}`
	cases := []struct {
		name    string
		setup   func(t *testing.T, path string)
		wantErr string
	}{
		{name: "good", setup: write(good)},
		{name: "missing", setup: func(*testing.T, string) {}, wantErr: "no such file"},
		{name: "symbolic link", setup: func(t *testing.T, path string) {
			target := filepath.Join(filepath.Dir(path), "real.json")
			write(good)(t, target)
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "is a symbolic link"},
		{name: "directory", setup: func(t *testing.T, path string) { os.Mkdir(path, 0o755) }, wantErr: "not a regular file"},
		{name: "FIFO", setup: func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Skip(err)
			}
		}, wantErr: "not a regular file"},
		{name: "too big", setup: write(good[:len(good)-1] + `,"x":"` + strings.Repeat("a", maxCDISpec) + `"}`), wantErr: "larger than"},
		{name: "bad JSON", setup: write(`{"kind":`), wantErr: "not a CDI spec"},
		{name: "not an object", setup: write(`[]`), wantErr: "not a CDI spec"},
		{name: "null", setup: write(`null`), wantErr: "kind"},
		{name: "unknown key", setup: write(strings.Replace(good, `"cdiVersion"`, `"cdiversion":"1","cdiVersion"`, 1)), wantErr: "unknown field"},
		{name: "unknown device key", setup: write(strings.Replace(good, `"name"`, `"nom":"x","name"`, 1)), wantErr: "unknown field"},
		{name: "key in another case", setup: write(strings.Replace(good, `"annotations"`, `"Annotations"`, 1)), wantErr: `unknown field "devices[0].Annotations"`},
		{name: "devices not a list", setup: write(`{"kind":"rdma-chain.github.io/rdma","devices":{}}`), wantErr: "devices"},
		{name: "annotation not a string", setup: write(strings.Replace(good, `"{}"`, `{}`, 1)), wantErr: "not a CDI spec"},
		{name: "data after", setup: write(good + `{}`), wantErr: "data after"},
		{name: "another kind", setup: write(strings.Replace(good, `rdma-chain.github.io/rdma`, `nvidia.com/gpu`, 1)), wantErr: `kind "nvidia.com/gpu"`},
		{name: "device twice", setup: write(strings.Replace(good, `"devices":[`, `"devices":[{"name":"`+uidA+`-mlx5-0"},`, 1)), wantErr: "listed twice"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := cdiSpecPath(t.TempDir(), uidA)
			tc.setup(t, path)
			spec, err := readCDISpec(path)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d, ok := spec.device(uidA + "-mlx5-0"); !ok || d.Annotations[config.ClaimConfigAnnotation] != "{}" {
				t.Errorf("device %+v %v", d, ok)
			}
			if _, ok := spec.device(uidA + "-mlx5-1"); ok {
				t.Error("found a device the spec lacks")
			}
		})
	}
}

// write returns a setup that writes s at the path.
func write(s string) func(t *testing.T, path string) {
	return func(t *testing.T, path string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// cfgClaim is claim device device of claim, with the CDI device pkg/dra
// makes for it in claim uid.
func cfgClaim(claim, uid, device string) podres.ClaimDevice {
	d := claimDev(claim, device)
	d.CDIDevices = []string{cdiIDPrefix + uid + "-" + device}
	return d
}

// writeSpec writes claim uid's CDI spec in dir, as pkg/dra does: one
// device per DRA device name, with cfg's annotation when it is set.
func writeSpec(t *testing.T, dir, uid string, devs map[string]*config.ClaimConfig) {
	t.Helper()
	var parts []string
	for dev, cfg := range devs {
		ann := ""
		if cfg != nil {
			v := strings.ReplaceAll(strings.ReplaceAll(cfg.Encode(), `\`, `\\`), `"`, `\"`)
			ann = `"annotations":{"` + config.ClaimConfigAnnotation + `":"` + v + `"},`
		}
		parts = append(parts, `{"name":"`+uid+"-"+dev+`",`+ann+`"containerEdits":{"env":["RDMA=1"]}}`)
	}
	spec := `{"cdiVersion":"0.6.0","kind":"` + cdiKind + `","devices":[` + strings.Join(parts, ",") + `]}`
	if err := os.WriteFile(cdiSpecPath(dir, uid), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
}
