package hostile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdma-chain/rdma-chain/pkg/state"
)

const (
	netName     = "hostile"
	containerID = "ctr-hostile"
	ifName      = "eth0"
	runTimeout  = 20 * time.Second
)

// validPrev is a 1.0.0 result as ptp returns it.
var validPrev = map[string]any{
	"cniVersion": "1.0.0",
	"interfaces": []any{map[string]any{"name": "eth0", "mac": "02:00:00:00:00:01", "sandbox": "@PODNS"}},
	"ips":        []any{map[string]any{"address": "10.77.0.5/24", "gateway": "10.77.0.1", "interface": 0}},
	"routes":     []any{map[string]any{"dst": "0.0.0.0/0"}},
}

// world is where one case runs.
type world struct {
	bin    string
	dir    string // the case's own folder
	out    string // stands for the rest of the host
	podNS  string
	nodeNS string
	// inNode runs fn with the thread in the netns the plugin must see as its host.
	inNode func(fn func() error) error
	// hostState reads what the plugin must not change in that netns.
	hostState func() (any, error)
}

func (w *world) replacer() *strings.Replacer {
	return strings.NewReplacer("@DIR", w.dir, "@OUT", w.out, "@PODNS", w.podNS,
		"@NODENS", w.nodeNS, "@SELFNS", "/proc/self/ns/net")
}

func (w *world) dataDir() string { return filepath.Join(w.dir, "state") }

func baseConf(w *world) map[string]any {
	prev, _ := json.Marshal(validPrev)
	var p any
	_ = json.Unmarshal([]byte(w.replacer().Replace(string(prev))), &p)
	return map[string]any{
		"cniVersion": "1.0.0", "name": netName, "type": "rdma-chain",
		"dataDir": w.dataDir(), "podResourcesSocket": filepath.Join(w.dir, "kubelet.sock"),
		"prevResult": p,
	}
}

func defaultEnv() map[string]string {
	return map[string]string{
		"CNI_COMMAND": "ADD", "CNI_CONTAINERID": containerID, "CNI_NETNS": "@PODNS",
		"CNI_IFNAME": ifName, "CNI_PATH": "@DIR/bin",
	}
}

// outcome is what one run of the plugin produced.
type outcome struct {
	stdout, stderr []byte
	err            error
	took           time.Duration
}

// runCase prepares, runs and checks one case.
func runCase(t *testing.T, w *world, c *Case) {
	repl := w.replacer()
	recPath := setup(t, w, c, repl)
	stdin, err := c.stdin(baseConf(w), repl)
	if err != nil {
		t.Fatalf("case stdin: %v", err)
	}
	env, err := c.environ(defaultEnv(), repl)
	if err != nil {
		t.Fatalf("case env: %v", err)
	}
	outBefore := treeOf(t, w.out)
	hostBefore, err := w.hostState()
	if err != nil {
		t.Fatal(err)
	}
	o := execPlugin(w, env, stdin)
	defer func() {
		if t.Failed() {
			t.Logf("stdout: %.400s", o.stdout)
			t.Logf("stderr: %.400s", o.stderr)
		}
	}()
	if o.took > runTimeout-time.Second {
		t.Errorf("plugin took %v", o.took)
	}
	if bytes.Contains(o.stderr, []byte("panic:")) || bytes.Contains(o.stderr, []byte("goroutine ")) {
		t.Errorf("plugin panicked")
	}
	checkAnswer(t, c, o, stdin)
	if got := treeOf(t, w.out); !reflect.DeepEqual(got, outBefore) {
		t.Errorf("files outside the case changed:\nbefore %v\nafter  %v", outBefore, got)
	}
	if hostAfter, err := w.hostState(); err != nil || !reflect.DeepEqual(hostAfter, hostBefore) {
		t.Errorf("host netns changed (%v):\nbefore %+v\nafter  %+v", err, hostBefore, hostAfter)
	}
	checkFiles(t, w, c, recPath, repl)
}

// checkAnswer checks exit status and stdout against the expectation.
func checkAnswer(t *testing.T, c *Case, o outcome, stdin []byte) {
	t.Helper()
	var exit *exec.ExitError
	if c.Expect.Code != 0 {
		if o.err == nil {
			t.Errorf("exit 0, want CNI error %d", c.Expect.Code)
			return
		}
		if !errors.As(o.err, &exit) || exit.ExitCode() <= 0 {
			t.Errorf("plugin did not exit with a status: %v", o.err)
		}
		checkErrorObject(t, o.stdout, c.Expect.Code)
		return
	}
	if o.err != nil {
		t.Errorf("want success, got %v", o.err)
		return
	}
	if c.Expect.PassThrough {
		checkPassThrough(t, o.stdout, stdin)
	}
}

// checkErrorObject wants exactly one JSON object with code, msg, cniVersion.
func checkErrorObject(t *testing.T, stdout []byte, code uint) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(stdout))
	var e struct {
		CNIVersion *string `json:"cniVersion"`
		Code       *uint   `json:"code"`
		Msg        string  `json:"msg"`
	}
	if err := dec.Decode(&e); err != nil {
		t.Errorf("stdout is not a JSON error object: %v", err)
		return
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		t.Errorf("stdout holds more than one JSON document")
	}
	switch {
	case e.Code == nil:
		t.Errorf("error object without code")
	case *e.Code != code:
		t.Errorf("code %d (%s), want %d", *e.Code, e.Msg, code)
	}
	if e.Msg == "" {
		t.Errorf("error object without msg")
	}
	if e.CNIVersion == nil || *e.CNIVersion == "" {
		t.Errorf("error object without cniVersion")
	}
}

// checkPassThrough wants the prevResult back, as one JSON document.
func checkPassThrough(t *testing.T, stdout, stdin []byte) {
	t.Helper()
	var conf struct {
		PrevResult map[string]any `json:"prevResult"`
	}
	_ = json.Unmarshal(stdin, &conf)
	var got map[string]any
	dec := json.NewDecoder(bytes.NewReader(stdout))
	if err := dec.Decode(&got); err != nil {
		t.Errorf("stdout is not a result: %v", err)
		return
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		t.Errorf("stdout holds more than one JSON document")
	}
	for _, k := range []string{"interfaces", "ips", "routes"} {
		if !reflect.DeepEqual(got[k], conf.PrevResult[k]) {
			t.Errorf("result %s = %v, prevResult had %v", k, got[k], conf.PrevResult[k])
		}
	}
}

// checkFiles checks quarantine, the record path and paths that must be absent.
func checkFiles(t *testing.T, w *world, c *Case, recPath string, repl *strings.Replacer) {
	t.Helper()
	q, _ := os.ReadDir(filepath.Join(w.dataDir(), "quarantine"))
	if len(q) != c.Expect.Quarantined {
		t.Errorf("%d entries quarantined, want %d", len(q), c.Expect.Quarantined)
	}
	if c.Expect.RecordGone {
		if _, err := os.Lstat(recPath); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("record %s still there (%v)", recPath, err)
		}
	}
	for _, p := range c.Expect.Absent {
		if _, err := os.Lstat(repl.Replace(p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists (%v)", p, err)
		}
	}
}

// execPlugin runs the binary with env and stdin in the node netns.
func execPlugin(w *world, env []string, stdin []byte) outcome {
	var o outcome
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, w.bin)
	cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = env, bytes.NewReader(stdin), &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := w.inNode(cmd.Run); err != nil {
		o.err = err
	}
	o.took, o.stdout, o.stderr = time.Since(start), stdout.Bytes(), stderr.Bytes()
	return o
}

// recordKey is the attachment of the default environment.
func recordKey() state.Key {
	return state.Key{Network: netName, ContainerID: containerID, IfName: ifName}
}
