package rdmares

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/pkg/config"
)

// maxCgroupFile bounds what ProcPodUID reads of /proc/PID/cgroup: a line
// per hierarchy (one with cgroup v2, about a dozen with v1), each path at
// most PATH_MAX.
const maxCgroupFile = 64 << 10

// ProcPodUID is the UID of the pod whose cgroup process pid of the
// caller's pid namespace is in, from /proc/PID/cgroup (ParsePodCgroup);
// "" when it is in no pod's cgroup. The file is readable by everyone: no
// capability is needed for a process of another uid. A process that has
// exited gives an error wrapping os.ErrNotExist (readPodUID).
func ProcPodUID(pid uint32) (string, error) {
	path := fmt.Sprintf("/proc/%d/cgroup", pid)
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	return readPodUID(f, path)
}

// readPodUID is ProcPodUID of the open /proc/PID/cgroup f at path. When
// the process exits after the open, the kernel answers the read with
// ESRCH (fs/proc/base.c, proc_single_show finds no task): that error wraps
// os.ErrNotExist too, as the open's ENOENT does, so a caller sees one
// "exited" either way.
func readPodUID(f io.Reader, path string) (string, error) {
	b, err := io.ReadAll(io.LimitReader(f, maxCgroupFile+1))
	if errors.Is(err, unix.ESRCH) {
		return "", fmt.Errorf("read %s: %w (%w)", path, err, os.ErrNotExist)
	}
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	uid, err := ParsePodCgroup(b)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return uid, nil
}

// ParsePodCgroup reads the pod UID of a process from the text of its
// /proc/PID/cgroup: "ID:CONTROLLERS:PATH" lines, one per hierarchy
// (cgroup v1, v2 or both). kubelet names a pod's cgroup after its UID:
// with the cgroupfs driver a path segment pod<UID> under kubepods or
// kubepods/<qos> (burstable, besteffort); with the systemd driver a
// segment kubepods[-<qos>]-pod<UID>.slice, the UID's "-" written "_"
// (pkg/kubelet/cm, CgroupName.ToSystemd). A reader in a cgroup namespace
// of its own sees paths relative to its root, whose leading ".." may stand
// for kubepods and the QoS segment. It returns "" for a process in no pod
// cgroup, and an error for text that is not the kernel's (too long, a
// malformed line, no line at all) or that names two pods; the UID has the
// shape CNI_ARGS's K8S_POD_UID must have (config.ValidPodUID).
func ParsePodCgroup(b []byte) (string, error) {
	if len(b) > maxCgroupFile {
		return "", fmt.Errorf("cgroup list longer than %d bytes", maxCgroupFile)
	}
	if len(b) == 0 || b[len(b)-1] != '\n' {
		return "", errors.New("cgroup list empty or without its last newline")
	}
	uid := ""
	for i, line := range bytes.Split(b[:len(b)-1], []byte{'\n'}) {
		path, err := cgroupLinePath(string(line))
		if err != nil {
			return "", fmt.Errorf("cgroup line %d: %w", i+1, err)
		}
		u, err := podUIDOfPath(path)
		if err != nil {
			return "", fmt.Errorf("cgroup line %d: %w", i+1, err)
		}
		if u != "" && uid != "" && u != uid {
			return "", fmt.Errorf("cgroup lines name two pods, %q and %q", uid, u)
		}
		if u != "" {
			uid = u
		}
	}
	return uid, nil
}

// cgroupLinePath checks one "ID:CONTROLLERS:PATH" line (ID decimal, PATH
// absolute; PATH may hold colons) and returns PATH.
func cgroupLinePath(line string) (string, error) {
	id, rest, ok := strings.Cut(line, ":")
	if !ok {
		return "", fmt.Errorf("%q has no hierarchy ID", clip(line))
	}
	_, path, ok := strings.Cut(rest, ":")
	if !ok || id == "" || len(id) > 10 || strings.Trim(id, "0123456789") != "" {
		return "", fmt.Errorf("%q is not ID:CONTROLLERS:PATH", clip(line))
	}
	if !strings.HasPrefix(path, "/") {
		return "", fmt.Errorf("path %q is not absolute", clip(path))
	}
	return path, nil
}

// podUIDOfPath is the UID of the pod cgroup path is in (kubelet's names,
// ParsePodCgroup), "" when none, an error when it names two.
func podUIDOfPath(path string) (string, error) {
	segs := strings.Split(path, "/")
	uid := ""
	for i, s := range segs {
		u := systemdPodUID(s)
		if u == "" {
			u = cgroupfsPodUID(segs[:i], s)
		}
		if u != "" && uid != "" && u != uid {
			return "", fmt.Errorf("path %q names two pods", clip(path))
		}
		if u != "" {
			uid = u
		}
	}
	return uid, nil
}

// systemdPodUID is the UID of a systemd driver's pod slice,
// [PREFIX-]kubepods[-burstable|-besteffort]-pod<UID, "-" as "_">.slice,
// else "".
func systemdPodUID(seg string) string {
	name, ok := strings.CutSuffix(seg, ".slice")
	if !ok {
		return ""
	}
	parts := strings.Split(name, "-")
	n := len(parts)
	esc, ok := strings.CutPrefix(parts[n-1], "pod")
	if !ok || n < 2 {
		return ""
	}
	if parts[n-2] != "kubepods" && (n < 3 || !isQoS(parts[n-2]) || parts[n-3] != "kubepods") {
		return ""
	}
	uid := strings.ReplaceAll(esc, "_", "-")
	if !config.ValidPodUID(uid) {
		return ""
	}
	return uid
}

// cgroupfsPodUID is the UID of a cgroupfs driver's pod cgroup seg,
// pod<UID>, whose parents (above) are kubepods or kubepods/<qos>, any of
// them ".." above a cgroup namespace's root; else "".
func cgroupfsPodUID(above []string, seg string) string {
	uid, ok := strings.CutPrefix(seg, "pod")
	if !ok || !config.ValidPodUID(uid) || len(above) == 0 {
		return ""
	}
	parent := above[len(above)-1]
	switch {
	case parent == "kubepods" || parent == "..":
		return uid
	case isQoS(parent) && len(above) >= 2 && (above[len(above)-2] == "kubepods" || above[len(above)-2] == ".."):
		return uid
	}
	return ""
}

// isQoS reports whether s is a kubelet QoS cgroup below kubepods
// (Guaranteed pods have none).
func isQoS(s string) bool { return s == "burstable" || s == "besteffort" }

// clip shortens untrusted text for an error message.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
