package rdmares

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rdma-chain/rdma-chain/pkg/config"
)

const (
	podUID = "6f1c2d3e-0000-4000-8000-000000000001"
	podEsc = "6f1c2d3e_0000_4000_8000_000000000001" // as the systemd driver writes it
	v1Tail = "12:rdma:/\n11:pids:/system.slice/containerd.service\n"
)

// cgroupCase is a /proc/PID/cgroup text and what ParsePodCgroup makes of
// it.
type cgroupCase struct {
	name, text, uid string
	bad             string // part of the error; "" parses
}

// cgroupCases are /proc/PID/cgroup texts as the kernel writes them, and
// hostile ones; FuzzParsePodCgroup's seed corpus is some of them
// (cgroupSeeds).
var cgroupCases = []cgroupCase{
	{"v2 cgroupfs besteffort", "0::/kubepods/besteffort/pod" + podUID + "/0123abcd\n", podUID, ""},
	{"v2 cgroupfs burstable", "0::/kubepods/burstable/pod" + podUID + "/0123abcd\n", podUID, ""},
	{"v2 cgroupfs guaranteed", "0::/kubepods/pod" + podUID + "/0123abcd\n", podUID, ""},
	{"v2 cgroupfs under a cgroup root", "0::/custom/kubepods/burstable/pod" + podUID + "/c\n", podUID, ""},
	{"v2 systemd besteffort", "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + podEsc + ".slice/cri-containerd-0123abcd.scope\n", podUID, ""},
	{"v2 systemd guaranteed", "0::/kubepods.slice/kubepods-pod" + podEsc + ".slice/crio-0123abcd.scope\n", podUID, ""},
	{"v2 systemd pod slice itself", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + podEsc + ".slice\n", podUID, ""},
	{"v2 systemd in a cgroup namespace", "0::/../../kubepods-besteffort.slice/kubepods-besteffort-pod" + podEsc + ".slice/cri-containerd-1.scope\n", podUID, ""},
	{"v2 cgroupfs in a cgroup namespace", "0::/../../../besteffort/pod" + podUID + "/c\n", podUID, ""},
	{"v2 cgroupfs guaranteed in a cgroup namespace", "0::/../../pod" + podUID + "/c\n", podUID, ""},
	{"v2 short uid", "0::/kubepods/podx-1/c\n", "x-1", ""},
	{"v1 cgroupfs", "13:memory:/kubepods/burstable/pod" + podUID + "/c\n12:cpu,cpuacct:/kubepods/burstable/pod" + podUID + "/c\n1:name=systemd:/kubepods/burstable/pod" + podUID + "/c\n" + v1Tail, podUID, ""},
	{"v1 systemd with a v2 line", "5:memory:/kubepods.slice/kubepods-pod" + podEsc + ".slice/docker-1.scope\n0::/kubepods.slice/kubepods-pod" + podEsc + ".slice/docker-1.scope\n", podUID, ""},
	{"v2 host process", "0::/system.slice/sshd.service\n", "", ""},
	{"v2 root", "0::/\n", "", ""},
	{"v1 host process", "4:memory:/user.slice\n" + v1Tail, "", ""},
	{"deleted cgroup of a host process", "0::/system.slice/x.service (deleted)\n", "", ""},
	{"path with a colon", "0::/a:b/kubepods/pod" + podUID + "/c\n", podUID, ""},
	{"pod not under kubepods", "0::/system.slice/pod" + podUID + "/c\n", "", ""},
	{"systemd pod not under kubepods", "0::/x.slice/other-pod" + podEsc + ".slice\n", "", ""},
	{"systemd qos not under kubepods", "0::/x.slice/other-burstable-pod" + podEsc + ".slice\n", "", ""},
	{"podman is no pod", "0::/kubepods/podman.service\n", "", ""},
	{"pod with a bad uid", "0::/kubepods/pod" + podUID + "$/c\n", "", ""},
	{"pod with an empty uid", "0::/kubepods/pod/c\n", "", ""},
	{"pod uid too long", "0::/kubepods/pod" + strings.Repeat("a", 65) + "/c\n", "", ""},
	{"systemd uid with a dot", "0::/kubepods.slice/kubepods-pod" + podEsc + ".x.slice\n", "", ""},
	{"two pods in one path", "0::/kubepods/poda/kubepods/podb/c\n", "", "names two pods"},
	{"two pods in two lines", "3:memory:/kubepods/poda/c\n0::/kubepods/podb/c\n", "", "name two pods"},
	{"empty", "", "", "empty"},
	{"no last newline", "0::/kubepods/poda/c", "", "last newline"},
	{"empty line", "0::/\n\n", "", "line 2"},
	{"no colon", "kubepods\n", "", "no hierarchy ID"},
	{"one colon", "0:/kubepods\n", "", "not ID:CONTROLLERS:PATH"},
	{"id not decimal", "x::/\n", "", "not ID:CONTROLLERS:PATH"},
	{"id too long", "12345678901::/\n", "", "not ID:CONTROLLERS:PATH"},
	{"relative path", "0::kubepods/poda\n", "", "not absolute"},
	{"NUL in path", "0::/kubepods/pod\x00a/c\n", "", ""},
	{"huge", "0::/" + strings.Repeat("a", maxCgroupFile) + "\n", "", "longer than"},
	{"huge line just fits", "0::/" + strings.Repeat("a/", (maxCgroupFile-6)/2) + "\n", "", ""},
}

func TestParsePodCgroup(t *testing.T) {
	for _, tc := range cgroupCases {
		t.Run(tc.name, func(t *testing.T) {
			uid, err := ParsePodCgroup([]byte(tc.text))
			switch {
			case tc.bad == "" && err != nil:
				t.Fatalf("error %v, want UID %q", err, tc.uid)
			case tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)):
				t.Fatalf("UID %q, error %v; want an error with %q", uid, err, tc.bad)
			case uid != tc.uid:
				t.Fatalf("UID %q, want %q", uid, tc.uid)
			}
		})
	}
}

// TestProcPodUID checks that the own process's file parses; a process
// that is not there, or that exited between the open and the read (the
// kernel answers the read with ESRCH), is an error wrapping
// os.ErrNotExist.
func TestProcPodUID(t *testing.T) {
	for _, tc := range []struct {
		name    string
		read    func(t *testing.T) (string, error)
		notHere bool
	}{
		{name: "own process", read: func(*testing.T) (string, error) { return ProcPodUID(uint32(os.Getpid())) }},
		// pid 2^31-1 is above pid_max: it never exists
		{name: "no such process", read: func(*testing.T) (string, error) { return ProcPodUID(1<<31 - 1) }, notHere: true},
		{name: "exited after the open", read: readAfterExit, notHere: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.read(t)
			t.Logf("error: %v", err)
			if tc.notHere != errors.Is(err, os.ErrNotExist) || (err != nil) != tc.notHere {
				t.Errorf("error %v, want one wrapping os.ErrNotExist: %v", err, tc.notHere)
			}
		})
	}
}

// readAfterExit opens the cgroup file of a child process, lets the child
// exit and be reaped, then reads the file.
func readAfterExit(t *testing.T) (string, error) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	path := fmt.Sprintf("/proc/%d/cgroup", cmd.Process.Pid)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	return readPodUID(f, path)
}

// FuzzParsePodCgroup feeds /proc/PID/cgroup texts to ParsePodCgroup. No
// input may panic, and a UID it gives has CNI_ARGS's shape and is in the
// text after "pod", as is or as the systemd driver escapes it. The seed
// corpus in testdata/fuzz/FuzzParsePodCgroup is cgroupSeeds'
// (TestCgroupSeedCorpus).
func FuzzParsePodCgroup(f *testing.F) {
	f.Fuzz(func(t *testing.T, text []byte) {
		uid, err := ParsePodCgroup(text)
		if err != nil || uid == "" {
			return
		}
		esc := strings.ReplaceAll(uid, "-", "_")
		named := bytes.Contains(text, []byte("pod"+uid)) || bytes.Contains(text, []byte("pod"+esc))
		if !config.ValidPodUID(uid) || !named {
			t.Fatalf("UID %q from %q", uid, text)
		}
	})
}

// cgroupSeeds are the cgroupCases the fuzz corpus starts from: each form,
// a host process, and two kinds of refusal.
var cgroupSeeds = []string{"v2 cgroupfs burstable", "v2 systemd besteffort", "v2 systemd in a cgroup namespace",
	"v2 cgroupfs in a cgroup namespace", "v1 cgroupfs", "v2 host process", "two pods in two lines", "one colon"}

// TestCgroupSeedCorpus checks that the checked-in corpus is cgroupSeeds'
// texts. UPDATE_FUZZ_CORPUS=1 rewrites it.
func TestCgroupSeedCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzParsePodCgroup")
	for _, name := range cgroupSeeds {
		i := slices.IndexFunc(cgroupCases, func(c cgroupCase) bool { return c.name == name })
		if i < 0 {
			t.Fatalf("no case %q", name)
		}
		want := fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\n", cgroupCases[i].text)
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if os.Getenv("UPDATE_FUZZ_CORPUS") == "1" {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, want) {
			t.Errorf("corpus %s differs from the case's text (err %v); rerun with UPDATE_FUZZ_CORPUS=1", path, err)
		}
	}
}
