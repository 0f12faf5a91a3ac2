package deploy

import (
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestPrivilegeTable checks that the privilege table of docs/install.md
// ("container | capabilities | host paths") says exactly what the base's
// containers get: the capabilities added, and each host path with its
// mode.
func TestPrivilegeTable(t *testing.T) {
	doc, err := os.ReadFile("../docs/install.md")
	if err != nil {
		t.Fatal(err)
	}
	table := privilegeTable(t, string(doc))
	s := render(t, treeFS(t), "/deploy/base").ds.Spec.Template.Spec
	hostPaths := map[string]string{}
	for _, v := range s.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	containers := append(slices.Clone(s.InitContainers), s.Containers...)
	if got := slices.Sorted(maps.Keys(table)); !slices.Equal(got, []string{"install", "reconcile"}) || len(containers) != 2 {
		t.Fatalf("table rows %v, containers %d", got, len(containers))
	}
	for _, c := range containers {
		row, ok := table[c.Name]
		if !ok {
			t.Errorf("container %s is not in the table", c.Name)
			continue
		}
		var caps []string
		if c.SecurityContext != nil && c.SecurityContext.Capabilities != nil {
			for _, a := range c.SecurityContext.Capabilities.Add {
				caps = append(caps, string(a))
			}
		}
		if !slices.Equal(caps, row.caps) {
			t.Errorf("%s: capabilities added %v, the table says %v", c.Name, caps, row.caps)
		}
		if got := mountsByHostPath(c, hostPaths); !maps.Equal(got, row.paths) {
			t.Errorf("%s: host paths %v, the table says %v", c.Name, got, row.paths)
		}
	}
}

// TestHostPID checks that the pod shares the host's PID namespace and
// network, no other host namespace, and docs/install.md says why: the
// RDMA core lists the owners of a pod's QPs, CQs, MRs and PDs only to a
// reader in a pid namespace that holds their processes (measured in the
// VM tier, scenario ops-usage).
func TestHostPID(t *testing.T) {
	doc, err := os.ReadFile("../docs/install.md")
	if err != nil {
		t.Fatal(err)
	}
	s := render(t, treeFS(t), "/deploy/base").ds.Spec.Template.Spec
	if !s.HostPID || !s.HostNetwork || s.HostIPC || (s.HostUsers != nil && !*s.HostUsers) {
		t.Errorf("pod: hostPID %v, hostNetwork %v, hostIPC %v, hostUsers %v; want the host's pid and network namespaces only",
			s.HostPID, s.HostNetwork, s.HostIPC, s.HostUsers)
	}
	row := regexp.MustCompile("(?m)^\\| per-pod RDMA usage metrics .*\\| reconcile \\| `hostPID` \\| (.+) \\|$").FindStringSubmatch(string(doc))
	if row == nil || !strings.Contains(row[1], "pid namespace") {
		t.Errorf("docs/install.md has no row saying why the pod needs hostPID (%q)", row)
	}
}

type privilegeRow struct {
	caps  []string
	paths map[string]string // host path -> ro | rw
}

var (
	codeSpan = regexp.MustCompile("`([^`]+)`")
	pathMode = regexp.MustCompile("`(/[^`]*)` (ro|rw)")
)

// privilegeTable reads the rows of the table headed "| container |
// capabilities | host paths |".
func privilegeTable(t *testing.T, doc string) map[string]privilegeRow {
	t.Helper()
	_, rest, ok := strings.Cut(doc, "| container | capabilities | host paths |\n")
	if !ok {
		t.Fatal("docs/install.md has no privilege table")
	}
	out := map[string]privilegeRow{}
	for _, line := range strings.Split(rest, "\n")[1:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 3 {
			t.Fatalf("privilege table row %q: %d cells", line, len(cells))
		}
		name := codeSpan.FindStringSubmatch(cells[0])
		if name == nil {
			t.Fatalf("privilege table row %q names no container", line)
		}
		row := privilegeRow{paths: map[string]string{}}
		if strings.TrimSpace(cells[1]) != "none" {
			for _, m := range codeSpan.FindAllStringSubmatch(cells[1], -1) {
				row.caps = append(row.caps, m[1])
			}
		}
		for _, m := range pathMode.FindAllStringSubmatch(cells[2], -1) {
			row.paths[m[1]] = m[2]
		}
		out[name[1]] = row
	}
	return out
}

// mountsByHostPath maps each mount of c to its volume's host path and mode.
func mountsByHostPath(c corev1.Container, hostPaths map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range c.VolumeMounts {
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		out[hostPaths[m.Name]] = mode
	}
	return out
}
