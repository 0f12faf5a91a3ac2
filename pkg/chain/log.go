package chain

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/outcome"
)

// newLogger logs to stderr and, when configured, to logFile. It never writes
// to stdout, which carries the CNI result. A line goes to logFile whatever
// stderr answered (see fileAndStderr).
func newLogger(conf *config.NetConf, stderr io.Writer) (*slog.Logger, func()) {
	if stderr == nil {
		stderr = os.Stderr
	}
	level := slog.LevelInfo
	out, closeFn := stderr, func() {}
	if conf != nil {
		_ = level.UnmarshalText([]byte(conf.LogLevel))
		if conf.LogFile != "" {
			f, err := openLogFile(conf.LogFile)
			if err != nil {
				// A log problem never fails a verb; the runtime keeps stderr.
				_, _ = fmt.Fprintf(stderr, "rdma-chain: warning: logFile %s not used: %v\n", conf.LogFile, err)
			} else {
				out, closeFn = fileAndStderr{file: f, stderr: stderr}, func() { _ = f.Close() }
			}
		}
	}
	h := slog.NewTextHandler(out, &slog.HandlerOptions{Level: level})
	return slog.New(h).With("plugin", "rdma-chain"), closeFn
}

// fileAndStderr writes each log line to the log file, then to stderr,
// each whatever the other answered. The runtime reads the plugin's stderr
// through a pipe: once it has died (containerd killed while it runs a
// DEL), that pipe is broken, and io.MultiWriter would stop at its error
// and lose the line the log file is for.
type fileAndStderr struct{ file, stderr io.Writer }

func (w fileAndStderr) Write(p []byte) (int, error) {
	n, err := w.file.Write(p)
	_, _ = w.stderr.Write(p)
	return n, err
}

// openLogFile opens path for appending without following a symlink (the
// plugin runs as root), creating it 0600, and refuses anything but a regular
// file.
func openLogFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("it is a symlink: %w", err)
		}
		return nil, err
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		_ = f.Close()
		return nil, errors.New("not a regular file")
	}
	return f, nil
}

// logOutcome logs the call's one closing line: done or failed, with the
// CNI code of a failure.
func logOutcome(c *call, took time.Duration, err error) {
	log := c.log
	attrs := []any{"ifname", c.args.IfName, "duration", took.Round(time.Microsecond)}
	if err != nil {
		var te *types.Error
		if errors.As(err, &te) {
			attrs = append(attrs, "code", te.Code)
		}
		log.Error("failed", append(attrs, "outcome", "error", "error", err)...)
		return
	}
	log.Info("done", append(attrs, "outcome", "ok")...)
}

// recordOutcome keeps the call's outcome in the bounded log under dataDir
// that `rdma-chain-ops inspect` shows (last outcome and last failure per pod).
// A conf that did not parse names no dataDir and leaves nothing on disk.
func recordOutcome(verb string, c *call, err error) {
	if c.conf == nil {
		return
	}
	e := outcome.Entry{Verb: verb, Network: c.conf.Name, ContainerID: c.args.ContainerID, IfName: c.args.IfName}
	if c.pod.Name != "" {
		e.Pod, e.PodUID = c.pod.String(), c.pod.UID
	}
	if err != nil {
		e.Msg = err.Error()
		var te *types.Error
		if errors.As(err, &te) {
			e.Code = te.Code
		}
	}
	if rerr := outcome.Record(c.conf.DataDir, e); rerr != nil {
		c.log.Warn("outcome log not written", "error", rerr)
	}
}
