package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInstallAutoMultus checks that on a node whose first conflist is
// Multus's, install --conflist auto puts the entry into the file the
// thick plugin's clusterNetwork names, and refuses the thin plugin's copy
// of the primary network after waiting out --wait (an init container that
// stays rather than restarts at once), saying so at once and naming
// --conflist; it edits no file of Multus.
func TestInstallAutoMultus(t *testing.T) {
	calico := `{"cniVersion":"0.3.1","name":"k8s-pod-network","plugins":[{"type":"calico"},{"type":"portmap","capabilities":{"portMappings":true}}]}`
	for _, tc := range []struct {
		name, multus string
		code         int
		out, errOut  string
	}{
		{"thin", `{"cniVersion":"0.3.1","name":"multus-cni-network","type":"multus","kubeconfig":"/etc/cni/net.d/multus.d/multus.kubeconfig","delegates":[` + calico + `]}`,
			ExitProblems, "waiting up to 1.1s for the conf dir to change: refusing CONF/00-multus.conf", "give --conflist naming the conflist to put the entry into"},
		{"thick", `{"cniVersion":"0.3.1","name":"multus-cni-network","type":"multus-shim","clusterNetwork":"CONF/10-calico.conflist"}`,
			ExitOK, "CONF/10-calico.conflist: rdma-chain entry inserted", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf := t.TempDir()
			multus := []byte(strings.ReplaceAll(tc.multus, "CONF", conf))
			for name, data := range map[string][]byte{"00-multus.conf": multus, "10-calico.conflist": []byte(calico)} {
				if err := os.WriteFile(filepath.Join(conf, name), data, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			code, out, errOut := run("install", "--cni-conf-dir", conf, "--conflist", "auto", "--wait", "1100ms", "--after", "calico",
				"--set", `{"mode":"shared"}`)
			if code != tc.code || !strings.Contains(out, strings.ReplaceAll(tc.out, "CONF", conf)) || !strings.Contains(errOut, tc.errOut) {
				t.Errorf("install: %d\n%s\n%s", code, out, errOut)
			}
			if got, _ := os.ReadFile(filepath.Join(conf, "00-multus.conf")); string(got) != string(multus) {
				t.Errorf("Multus's file changed:\n%s", got)
			}
			got, _ := os.ReadFile(filepath.Join(conf, "10-calico.conflist"))
			if written := strings.Contains(string(got), `"rdma-chain"`); written != (tc.code == ExitOK) {
				t.Errorf("the primary's conflist:\n%s", got)
			}
		})
	}
}
