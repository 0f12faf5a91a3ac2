package chain

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/pkg/config"
)

// maxStdin bounds the network configuration the plugin reads.
const maxStdin = 4 << 20

// Main serves one CNI call of the runtime: it runs the verb through the CNI
// library's dispatcher and prints a failure as the spec asks, one error
// object carrying the configuration's cniVersion. It returns the exit code.
func Main(p *Plugin, about string) int {
	survivePipes()
	stdin, err := replayStdin()
	if err != nil {
		return printError(p.env.Stdout, types.NewError(types.ErrIOFailure, "cannot read the network configuration", err.Error()), "")
	}
	if os.Getenv("CNI_COMMAND") == "" {
		// The library would only print its about line and exit 0.
		e := types.NewError(types.ErrInvalidEnvironmentVariables, "required env variables [CNI_COMMAND] missing", "")
		return printError(p.env.Stdout, e, confVersion(stdin))
	}
	funcs := skel.CNIFuncs{Add: p.Add, Del: p.Del, Check: p.Check, GC: p.GC, Status: p.Status}
	if e := skel.PluginMainFuncsWithError(funcs, version.PluginSupports(config.SupportedVersions...), about); e != nil {
		return printError(p.env.Stdout, e, confVersion(stdin))
	}
	return 0
}

// survivePipes keeps the plugin running when its runtime dies during the
// call (containerd killed or restarted while it waits for a DEL): the
// runtime reads the plugin's stdout and stderr through pipes, and Go ends a
// process that writes to a broken pipe on fd 1 or 2 with SIGPIPE unless
// the signal is notified. The plugin would die at its next log line,
// halfway through a DEL or ADD, with its log file and outcome log
// missing the call. Notified, such a write fails with EPIPE, which the
// logger and the result printer drop. The handler is the runtime's, so the
// plugin's children (the IPAM, the hook loader) still start with SIGPIPE's
// default.
func survivePipes() {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
}

// replayStdin reads stdin (bounded) and puts an identical stdin back for
// the dispatcher, so the error printer can know the configuration's version.
func replayStdin() ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(os.Stdin, maxStdin+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxStdin {
		return nil, fmt.Errorf("network configuration larger than %d bytes", maxStdin)
	}
	fd, err := unix.MemfdCreate("stdin", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd for stdin: %w", err)
	}
	f := os.NewFile(uintptr(fd), "stdin")
	if _, err := f.Write(data); err != nil {
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	os.Stdin = f
	return data, nil
}

// confVersion is the cniVersion the configuration declares, if it has one
// the plugin supports.
func confVersion(stdin []byte) string {
	var v struct {
		CNIVersion string `json:"cniVersion"`
	}
	if json.Unmarshal(stdin, &v) != nil {
		return ""
	}
	for _, s := range config.SupportedVersions {
		if s == v.CNIVersion {
			return s
		}
	}
	return ""
}

// printError writes e as the spec's error object and returns exit code 1.
func printError(w io.Writer, e *types.Error, cniVersion string) int {
	if cniVersion == "" {
		cniVersion = version.Current()
	}
	out := struct {
		CNIVersion string `json:"cniVersion"`
		Code       uint   `json:"code"`
		Msg        string `json:"msg"`
		Details    string `json:"details,omitempty"`
	}{cniVersion, e.Code, e.Msg, e.Details}
	data, err := json.MarshalIndent(out, "", "    ")
	if err == nil {
		_, err = w.Write(append(data, '\n'))
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "rdma-chain: cannot print error %v: %v\n", e, err)
	}
	return 1
}
