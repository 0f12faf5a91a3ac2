package conflist

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The primary's conflist as Calico writes it, and Multus's files in the
// shapes Multus generates them: the thin plugin's (its delegate a copy of
// the primary's conflist, a .conf, or a .conflist from CNI 1.0.0), the
// thick plugin's shim (the same copy, or clusterNetwork naming a file that
// Multus loads at each ADD). DIR is the conf dir.
const (
	calicoList = `{"cniVersion":"0.3.1","name":"k8s-pod-network","plugins":[{"type":"calico","ipam":{"type":"calico-ipam"}},{"type":"portmap","capabilities":{"portMappings":true}}]}`
	multusThin = `{"cniVersion":"0.3.1","name":"multus-cni-network","type":"multus","capabilities":{"portMappings":true},` +
		`"kubeconfig":"/etc/cni/net.d/multus.d/multus.kubeconfig","delegates":[` + calicoList + `]}`
	multusThinList = `{"cniVersion":"1.0.0","name":"multus-cni-network","plugins":[{"type":"multus","capabilities":{"portMappings":true},` +
		`"kubeconfig":"/etc/cni/net.d/multus.d/multus.kubeconfig","delegates":[` + calicoList + `]}]}`
	multusThickCopy = `{"cniVersion":"0.3.1","name":"multus-cni-network","type":"multus-shim","capabilities":{"portMappings":true},` +
		`"kubeconfig":"/etc/cni/net.d/multus.d/multus.kubeconfig","delegates":[` + calicoList + `],"logLevel":"verbose","logToStderr":true}`
	multusThickCluster = `{"cniVersion":"0.3.1","name":"multus-cni-network","type":"multus-shim","logLevel":"verbose","logToStderr":true,"clusterNetwork":"CN"}`
)

// TestPrimaryThroughMultus checks that a conf dir whose first file is
// Multus's gives the file Multus's clusterNetwork names there, which
// Multus reads at each ADD; a primary network copied into Multus's file
// (thin or thick), a clusterNetwork elsewhere, by name or through a
// symlink, and a Multus file naming no network are refused with a message
// that names --conflist (and the file holding a network of the delegate's
// name); a single-plugin .conf of another type is the primary's.
func TestPrimaryThroughMultus(t *testing.T) {
	tests := []struct {
		name    string
		first   string // 00-multus.conf, or the named file with "name=content"
		cn      string // clusterNetwork (DIR: the conf dir)
		link    bool   // 10-calico.conflist is a symlink to 20-calico.real
		want    string
		wantErr []string
	}{
		{name: "thin copy", first: multusThin, wantErr: []string{`it is Multus's (type "multus")`, `primary network "k8s-pod-network" is a copy inside it`,
			"DIR/10-calico.conflist holds a network of that name", "give --conflist"}},
		{name: "thin conflist", first: "00-multus.conflist=" + multusThinList, wantErr: []string{`refusing DIR/00-multus.conflist`, `(type "multus")`,
			"DIR/10-calico.conflist holds", "give --conflist"}},
		{name: "thick copy", first: multusThickCopy, wantErr: []string{`(type "multus-shim")`, "is a copy inside it", "give --conflist"}},
		{name: "thick clusterNetwork here", first: multusThickCluster, cn: "DIR/10-calico.conflist", want: "10-calico.conflist"},
		{name: "thick clusterNetwork elsewhere", first: multusThickCluster, cn: "/opt/cni/net.d/10-calico.conflist",
			wantErr: []string{"clusterNetwork /opt/cni/net.d/10-calico.conflist is not another file of this directory", "give --conflist"}},
		{name: "thick clusterNetwork by name", first: multusThickCluster, cn: "k8s-pod-network",
			wantErr: []string{`clusterNetwork "k8s-pod-network" is not a file path`, "give --conflist"}},
		{name: "thick clusterNetwork symlink", first: multusThickCluster, cn: "DIR/10-calico.conflist", link: true,
			wantErr: []string{"clusterNetwork DIR/10-calico.conflist is a symlink"}},
		{name: "thick clusterNetwork itself", first: multusThickCluster, cn: "DIR/00-multus.conf", wantErr: []string{"is not another file"}},
		{name: "no network", first: `{"cniVersion":"0.3.1","name":"m","type":"multus","delegates":[]}`, wantErr: []string{"names no primary network"}},
		{name: "not Multus's", first: `{"cniVersion":"0.3.1","name":"bridge-net","type":"bridge"}`, want: "00-multus.conf"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			name, content, ok := strings.Cut(tt.first, "=")
			if !ok || !strings.HasPrefix(name, "00-") {
				name, content = "00-multus.conf", tt.first
			}
			write(t, dir, name, strings.ReplaceAll(content, "CN", strings.ReplaceAll(tt.cn, "DIR", dir)))
			if tt.link {
				write(t, dir, "20-calico.real", calicoList)
				if err := os.Symlink(filepath.Join(dir, "20-calico.real"), filepath.Join(dir, "10-calico.conflist")); err != nil {
					t.Fatal(err)
				}
			} else {
				write(t, dir, "10-calico.conflist", calicoList)
			}
			got, err := Primary(dir)
			if len(tt.wantErr) > 0 {
				if !errors.Is(err, ErrMultus) {
					t.Fatalf("Primary = %q, %v; want ErrMultus", got, err)
				}
				for _, w := range tt.wantErr {
					if w = strings.ReplaceAll(w, "DIR", dir); !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil || got != filepath.Join(dir, tt.want) {
				t.Errorf("Primary = %q, %v; want %s", got, err, tt.want)
			}
		})
	}
}

// TestWaitPrimaryMultus checks that a Multus file that is refused is
// waited out for the whole wait, reported once as soon as it is seen, and
// the error after the wait says why.
func TestWaitPrimaryMultus(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "00-multus.conf", multusThin)
	write(t, dir, "10-calico.conflist", calicoList)
	var reported []error
	_, err := WaitPrimary(dir, 1100*time.Millisecond, func(err error) { reported = append(reported, err) })
	if !errors.Is(err, ErrMultus) || !strings.Contains(err.Error(), "after 1.1s") || !strings.Contains(err.Error(), "--conflist") {
		t.Errorf("WaitPrimary: %v", err)
	}
	if len(reported) != 1 || !errors.Is(reported[0], ErrMultus) {
		t.Errorf("reported %v, want the refusal once", reported)
	}
}

// TestSameDirSeen checks that the DaemonSet's install sees the node's conf
// dir as /host/etc/cni/net.d, its reconcile as /etc/cni/net.d, and Multus
// writes clusterNetwork as it sees it: each spelling names the same file
// for both.
func TestSameDirSeen(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want bool
	}{
		{"/etc/cni/net.d", "/etc/cni/net.d", true},
		{"/host/etc/cni/net.d", "/etc/cni/net.d", true},
		{"/etc/cni/net.d", "/host/etc/cni/net.d/", true},
		{"/host/etc/cni/net.d", "/host/etc/cni/net.d", true},
		{"/opt/cni/net.d", "/etc/cni/net.d", false},
		{"/host/xetc/cni/net.d", "/etc/cni/net.d", false}, // not at a name's start
		{"/etc/cni/net.d", "/net.d", false},               // one name is too little
		{"/", "/etc", false},
	} {
		if got := sameDirSeen(tt.a, tt.b); got != tt.want {
			t.Errorf("sameDirSeen(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}

// TestClusterNetworkAcrossViews checks that a clusterNetwork spelled as
// install's view names the file reconcile sees in its own, and the other
// way round.
func TestClusterNetworkAcrossViews(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "host", "etc", "cni", "net.d")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, dir, "10-calico.conflist", calicoList)
	refuse := fmt.Errorf
	for _, cn := range []string{"/etc/cni/net.d/10-calico.conflist", filepath.Join(dir, "10-calico.conflist")} {
		got, err := clusterNetworkFile(dir, filepath.Join(dir, "00-multus.conf"), cn, refuse)
		if err != nil || got != filepath.Join(dir, "10-calico.conflist") {
			t.Errorf("clusterNetwork %s: %q, %v; want %s", cn, got, err, filepath.Join(dir, "10-calico.conflist"))
		}
	}
}
