package hookcmd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rdma-chain/rdma-chain/pkg/smc/hookmap"
)

// Binary is the hook binary's file name, beside the plugin's.
const Binary = "rdma-chain-smc-hook"

// Verbs of the hook binary: rdma-chain-smc-hook VERB DIR [INODE].
const (
	VerbSupported = "supported"
	VerbAdd       = "add"
	VerbRemove    = "remove"
	VerbListed    = "listed"
	VerbState     = "state"
	VerbHold      = "hold"
	VerbRelease   = "release"
)

// timeout bounds one run: loading and attaching the program on a busy node
// takes well under a second.
const timeout = 30 * time.Second

// ErrNotInstalled means there is no hook binary beside the plugin.
var ErrNotInstalled = errors.New(Binary + " is not installed beside the plugin")

// Runner runs the hook binary at Path.
type Runner struct{ Path string }

// Beside returns the Runner for the hook binary in the plugin executable's
// own directory (the real path, as the kernel reports it).
func Beside() Runner {
	self, err := os.Executable()
	if err != nil {
		return Runner{}
	}
	return Runner{Path: filepath.Join(filepath.Dir(self), Binary)}
}

// Supported tells whether the kernel can run the hook with pins under dir.
func (r Runner) Supported(dir string) error {
	_, err := r.run(VerbSupported, dir)
	return err
}

// Add lists the netns with inode ino, attaching the program first if needed.
func (r Runner) Add(dir string, ino uint64) error {
	_, err := r.run(VerbAdd, dir, strconv.FormatUint(ino, 10))
	return err
}

// Remove unlists ino; the last one detaches the program.
func (r Runner) Remove(dir string, ino uint64) error {
	_, err := r.run(VerbRemove, dir, strconv.FormatUint(ino, 10))
	return err
}

// Listed reports whether ino is listed and the program attached.
func (r Runner) Listed(dir string, ino uint64) (bool, error) {
	out, err := r.run(VerbListed, dir, strconv.FormatUint(ino, 10))
	if err != nil {
		return false, err
	}
	return ParseListed(out)
}

// State returns what the pins under dir say.
func (r Runner) State(dir string) (hookmap.Status, error) {
	out, err := r.run(VerbState, dir)
	if err != nil {
		return hookmap.Status{}, err
	}
	return ParseState(out)
}

// Hold attaches the program if needed and keeps it attached with no netns
// listed, until Release.
func (r Runner) Hold(dir string) error {
	_, err := r.run(VerbHold, dir)
	return err
}

// Release undoes Hold; with no netns listed the program detaches.
func (r Runner) Release(dir string) error {
	_, err := r.run(VerbRelease, dir)
	return err
}

// run execs the binary with no environment and returns its stdout; a
// failure carries its stderr. The binary must be a regular file: a symlink
// is not followed.
func (r Runner) run(args ...string) (string, error) {
	if r.Path == "" {
		return "", ErrNotInstalled
	}
	st, err := os.Lstat(r.Path)
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("%w (%s)", ErrNotInstalled, r.Path)
	}
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", r.Path)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.Path, args...)
	cmd.Env = []string{}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return "", fmt.Errorf("%s %s: %s", Binary, args[0], msg)
	}
	return stdout.String(), nil
}

// FormatListed and ParseListed are the listed verb's output: "1" or "0".
func FormatListed(listed bool) string {
	if listed {
		return "1\n"
	}
	return "0\n"
}

func ParseListed(out string) (bool, error) {
	switch strings.TrimSpace(out) {
	case "1":
		return true, nil
	case "0":
		return false, nil
	}
	return false, fmt.Errorf("%s listed printed %q", Binary, out)
}

// FormatState and ParseState are the state verb's output: "attached 0|1",
// "held 0|1", then one listed netns inode per line.
func FormatState(st hookmap.Status) string {
	var b strings.Builder
	b.WriteString("attached " + FormatListed(st.Attached))
	b.WriteString("held " + FormatListed(st.Held))
	for _, ino := range st.Listed {
		b.WriteString(strconv.FormatUint(uint64(ino), 10) + "\n")
	}
	return b.String()
}

func ParseState(out string) (hookmap.Status, error) {
	var st hookmap.Status
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) < 2 {
		return st, fmt.Errorf("%s state printed %q", Binary, out)
	}
	for i, field := range []*bool{&st.Attached, &st.Held} {
		name := [...]string{"attached ", "held "}[i]
		v, ok := strings.CutPrefix(lines[i], name)
		if !ok {
			return st, fmt.Errorf("%s state printed %q", Binary, out)
		}
		var err error
		if *field, err = ParseListed(v); err != nil {
			return st, err
		}
	}
	for _, l := range lines[2:] {
		ino, err := strconv.ParseUint(l, 10, 32)
		if err != nil || ino == uint64(hookmap.HoldKey) {
			return st, fmt.Errorf("%s state printed %q: not a netns inode number", Binary, l)
		}
		st.Listed = append(st.Listed, uint32(ino))
	}
	return st, nil
}
