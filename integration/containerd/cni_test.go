//go:build containerd

package containerd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// netName is the conflist's network name; host-local keeps leases under it.
const netName = "rdmanet"

// cniDirs are the CNI folders the test's containerd uses.
type cniDirs struct {
	bin, conf, ipam, state, log, socket string
	version                             string         // the conflist's cniVersion
	rdmaKeys                            map[string]any // more keys of the rdma-chain entry
}

// setupCNI fills a bin dir with symlinks to ptp, host-local, loopback and
// rdma-chain and writes the conflist [ptp + host-local, rdma-chain] at
// cniVersion with smcr.onUnsupported "warn".
func setupCNI(t *testing.T, dir, cniVersion string, opts envOptions) cniDirs {
	t.Helper()
	d := cniDirs{
		bin: filepath.Join(dir, "cni-bin"), conf: filepath.Join(dir, "net.d"),
		ipam: filepath.Join(dir, "ipam"), state: filepath.Join(dir, "state"),
		log: filepath.Join(dir, "rdma-chain.log"), socket: filepath.Join(dir, "kubelet.sock"),
		version: cniVersion, rdmaKeys: opts.rdmaKeys,
	}
	for _, p := range []string{d.bin, d.conf} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	plugin := opts.plugin
	if plugin == "" {
		plugin = builtBinary(t, "rdma-chain")
	}
	symlink(t, plugin, filepath.Join(d.bin, "rdma-chain"))
	tools := testenv.ToolsDir("cni", "bin")
	for _, p := range []string{"ptp", "host-local", "loopback"} {
		symlink(t, testenv.RequireBinary(t, p, tools), filepath.Join(d.bin, p))
	}
	d.writeConflist(t, "warn")
	return d
}

// builtBinary is the project's binary name as make built it: beside
// $RDMA_CHAIN_BIN, else in the repository's bin/.
func builtBinary(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join(testenv.RepoRoot(), "bin")
	if plugin := os.Getenv("RDMA_CHAIN_BIN"); plugin != "" {
		dir = filepath.Dir(plugin)
	}
	return testenv.RequireBinary(t, name, dir)
}

// writeConflist (re)writes the conflist with smcr.onUnsupported; containerd
// reloads conf_dir when it changes. Written aside and renamed, so containerd
// never reads half a file.
func (d cniDirs) writeConflist(t *testing.T, onUnsupported string) {
	t.Helper()
	tmp := filepath.Join(d.conf, ".10-rdmanet.tmp")
	writeFile(t, tmp, d.conflist(t, onUnsupported))
	if err := os.Rename(tmp, filepath.Join(d.conf, "10-rdmanet.conflist")); err != nil {
		t.Fatal(err)
	}
}

// conflist is the chain at the dirs' cniVersion.
func (d cniDirs) conflist(t *testing.T, onUnsupported string) []byte {
	t.Helper()
	entry := map[string]any{
		"type": "rdma-chain", "podSelection": "requested", "resourceNames": []string{"rdma/hca"},
		"podResourcesSocket": d.socket, "dataDir": d.state, "logFile": d.log, "logLevel": "debug",
		"smcr":         map[string]string{"onUnsupported": onUnsupported},
		"capabilities": map[string]bool{"io.kubernetes.cri.pod-annotations": true},
	}
	for k, v := range d.rdmaKeys {
		entry[k] = v
	}
	list := map[string]any{
		"cniVersion": d.version, "name": netName,
		"plugins": []any{
			map[string]any{"type": "ptp", "ipMasq": false, "ipam": map[string]any{
				"type": "host-local", "dataDir": d.ipam,
				"ranges": [][]map[string]string{{{"subnet": "10.66.0.0/24"}}},
			}},
			entry,
		},
	}
	b, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	abs, err := filepath.Abs(target)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(abs, link); err != nil {
		t.Fatal(err)
	}
}

// attachments lists the plugin's state records.
func (d cniDirs) attachments(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(d.state, "attachments"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// leases lists host-local's lease files (named by IP) holding containerID,
// or all of them for "".
func (d cniDirs) leases(t *testing.T, containerID string) []string {
	t.Helper()
	return leasesIn(t, d.ipam, containerID)
}

// leasesIn lists the lease files of host-local's dataDir ipam holding
// containerID, or all of them for "".
func leasesIn(t *testing.T, ipam, containerID string) []string {
	t.Helper()
	dir := filepath.Join(ipam, netName)
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var held []string
	for _, e := range entries {
		if e.Name() == "lock" || strings.HasPrefix(e.Name(), "last_reserved_ip") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err == nil && strings.Contains(string(b), containerID) {
			held = append(held, e.Name())
		}
	}
	return held
}

// logLine is one slog text line of the plugin's logFile, key → value.
type logLine map[string]string

// logLines parses the plugin's logFile.
func (d cniDirs) logLines(t *testing.T) []logLine {
	t.Helper()
	b, err := os.ReadFile(d.log)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var lines []logLine
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" {
			lines = append(lines, parseLogfmt(l))
		}
	}
	return lines
}

// parseLogfmt splits `k=v k="quoted v"` as log/slog's text handler writes it.
func parseLogfmt(s string) logLine {
	out := logLine{}
	for s = strings.TrimLeft(s, " "); s != ""; s = strings.TrimLeft(s, " ") {
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			break
		}
		key, rest := s[:eq], s[eq+1:]
		val, n := rest, len(rest)
		if strings.HasPrefix(rest, `"`) {
			if q, err := strconv.QuotedPrefix(rest); err == nil {
				n = len(q)
				val, _ = strconv.Unquote(q)
			}
		} else if sp := strings.IndexByte(rest, ' '); sp >= 0 {
			val, n = rest[:sp], sp
		}
		out[key] = val
		s = rest[n:]
	}
	return out
}

// find returns the lines whose keys have all the given values.
func find(lines []logLine, kv ...string) []logLine {
	var hits []logLine
	for _, l := range lines {
		ok := true
		for i := 0; i+1 < len(kv); i += 2 {
			ok = ok && l[kv[i]] == kv[i+1]
		}
		if ok {
			hits = append(hits, l)
		}
	}
	return hits
}
