//go:build containerd

package containerd

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// pauseImage is the sandbox image the CRI plugin is configured with.
const pauseImage = "localhost/pause:test"

// importPause builds the pause binary, packs it as a docker-archive tar and
// imports it into containerd's k8s.io namespace, unpacked for native.
func importPause(t *testing.T, ctr, socket, dir string) {
	t.Helper()
	bin := buildPause(t, dir)
	archive := filepath.Join(dir, "pause.tar")
	writeFile(t, archive, dockerArchive(t, bin))
	out, err := exec.Command(ctr, "--address", socket, "-n", "k8s.io",
		"images", "import", "--snapshotter", "native", archive).CombinedOutput()
	if err != nil {
		t.Fatalf("ctr images import: %v\n%s", err, out)
	}
}

// buildPause builds ./pause as a static binary and returns its bytes.
func buildPause(t *testing.T, dir string) []byte {
	t.Helper()
	out := filepath.Join(dir, "pause")
	if b, err := testenv.GoCmd("build", "-o", out, "./integration/containerd/pause").CombinedOutput(); err != nil {
		t.Fatalf("go build ./pause: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// dockerArchive is `docker save` output for one image: manifest.json, the
// image config and one layer holding /pause.
func dockerArchive(t *testing.T, pause []byte) []byte {
	t.Helper()
	layer := tarFiles(t, map[string][]byte{"pause": pause}, 0o755)
	sum := sha256.Sum256(layer)
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH, "os": "linux",
		"config": map[string]any{"Entrypoint": []string{"/pause"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(sum[:])}},
	})
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := json.Marshal([]map[string]any{{
		"Config": "config.json", "RepoTags": []string{pauseImage}, "Layers": []string{"layer.tar"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return tarFiles(t, map[string][]byte{"manifest.json": manifest, "config.json": config, "layer.tar": layer}, 0o644)
}

// tarFiles packs files (name → content) with one mode, in a fixed order.
func tarFiles(t *testing.T, files map[string][]byte, mode int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range []string{"manifest.json", "config.json", "layer.tar", "pause"} {
		data, ok := files[name]
		if !ok {
			continue
		}
		hdr := &tar.Header{Name: name, Mode: mode, Size: int64(len(data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
