package leakcheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"

	"github.com/rdma-chain/rdma-chain/internal/testonly/testenv"
)

// leakProbeEnv makes the test binary, run again by TestMainFailsOnLeak, a
// binary whose one case leaks a process.
const leakProbeEnv = "RC_LEAKCHECK_PROBE"

func TestMain(m *testing.M) {
	if os.Getenv(leakProbeEnv) == "1" {
		grace = 500 * time.Millisecond
	}
	Main(m)
}

func TestLeakProbe(t *testing.T) {
	if os.Getenv(leakProbeEnv) != "1" {
		t.Skip("run by TestMainFailsOnLeak")
	}
	if err := exec.Command("sleep", "30").Start(); err != nil {
		t.Fatal(err)
	}
}

// TestMainFailsOnLeak checks that a binary whose tests pass but leave a
// process running exits 1, names the process, and leaves it killed.
func TestMainFailsOnLeak(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestLeakProbe$")
	cmd.Env = append(os.Environ(), leakProbeEnv+"=1")
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 1 ||
		!strings.Contains(string(out), "leakcheck: FAIL: 1 left behind by the tests") || !strings.Contains(string(out), "(sleep)") {
		t.Errorf("probe: %v, want exit 1 naming the sleep:\n%s", err, out)
	}
}

func TestParseMountinfo(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
		bad  bool
	}{
		{"root and a netns pin",
			"22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n" +
				"900 25 0:4 net:[4026532] /run/netns/cnitest-1 rw shared:5 - nsfs nsfs rw\n",
			[]string{"mount / (ext4 /dev/vda1 /)", "mount /run/netns/cnitest-1 (nsfs nsfs net:[4026532])"}, false},
		{"the netns dir's own bind mount is left out",
			"800 25 0:25 /netns /run/netns rw shared:5 - tmpfs tmpfs rw\n", nil, false},
		{"no separator", "22 1 254:1 / / rw\n", nil, true},
		{"too few fields", "22 1 / - ext4 /dev/vda1 rw\n", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseMountinfo(strings.NewReader(tt.in))
			if (err != nil) != tt.bad || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %q, %v; want %q, error %v", got, err, tt.want, tt.bad)
			}
		})
	}
}

func TestReadStatOddCommand(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "a) b (c")
	if err := os.Symlink("/bin/sleep", bin); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	st, err := readStat(cmd.Process.Pid)
	if err != nil || st.comm != "a) b (c" || st.ppid != os.Getpid() {
		t.Errorf("stat %+v, %v; want comm %q and ppid %d", st, err, "a) b (c", os.Getpid())
	}
}

// TestLeftAfterChild checks that a child process still running after
// the tests is reported; once it has been waited for, nothing is.
func TestLeftAfterChild(t *testing.T) {
	before, err := take(false)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	left, err := leftAfter(before, false, 0)
	want := "process " + strconv.Itoa(cmd.Process.Pid) + " (sleep)"
	if err != nil || !reflect.DeepEqual(left, []string{want}) {
		t.Errorf("left %q, %v; want %q", left, err, want)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if left, err := leftAfter(before, false, 5*time.Second); err != nil || len(left) != 0 {
		t.Errorf("after the wait: left %q, %v; want nothing", left, err)
	}
}

// TestLeftAfterOrphan checks that a process whose parent exits (a
// daemon forking away) is still this binary's, as its subreaper.
func TestLeftAfterOrphan(t *testing.T) {
	before, err := take(false)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!").Output()
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("kill", pid).Run(); reapZombies() })
	left, err := leftAfter(before, false, 0)
	if want := []string{"process " + pid + " (sleep)"}; err != nil || !reflect.DeepEqual(left, want) {
		t.Errorf("left %q, %v; want %q", left, err, want)
	}
}

// TestLeftAfterHost checks that an empty netns pin, a link and a mount the
// tests made are each reported, and nothing once they are gone.
func TestLeftAfterHost(t *testing.T) {
	testenv.Privileged(t)
	before, err := take(true)
	if err != nil {
		t.Fatal(err)
	}
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	_ = n.Close()
	pin := filepath.Join(NetnsDir, filepath.Base(n.Path())) // testutils says /var/run
	if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "leakcheck0"}}); err != nil {
		t.Fatal(err)
	}
	left, err := leftAfter(before, true, 0)
	want := []string{"link leakcheck0 (bridge)", "mount " + pin + " (nsfs nsfs ", "netns pin " + pin}
	if err != nil || len(left) != 3 || left[0] != want[0] || !strings.HasPrefix(left[1], want[1]) || left[2] != want[2] {
		t.Errorf("left %q, %v; want %q", left, err, want)
	}
	if err := testutils.UnmountNS(n); err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkDel(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "leakcheck0"}}); err != nil {
		t.Fatal(err)
	}
	if left, err := leftAfter(before, true, 5*time.Second); err != nil || len(left) != 0 {
		t.Errorf("after the cleanup: left %q, %v; want nothing", left, err)
	}
}
