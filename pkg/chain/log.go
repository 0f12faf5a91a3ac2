package chain

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/rdma-chain/rdma-chain/pkg/config"
)

// newLogger logs to stderr and, when configured, to logFile. It never writes
// to stdout, which carries the CNI result.
func newLogger(conf *config.NetConf, stderr io.Writer) (*slog.Logger, func()) {
	if stderr == nil {
		stderr = os.Stderr
	}
	level := slog.LevelInfo
	out, closeFn := stderr, func() {}
	if conf != nil {
		_ = level.UnmarshalText([]byte(conf.LogLevel))
		if conf.LogFile != "" {
			f, err := os.OpenFile(conf.LogFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
			if err == nil {
				out, closeFn = io.MultiWriter(stderr, f), func() { _ = f.Close() }
			}
		}
	}
	h := slog.NewTextHandler(out, &slog.HandlerOptions{Level: level})
	return slog.New(h).With("plugin", "rdma-chain"), closeFn
}

func logOutcome(log *slog.Logger, verb string, c *call, took time.Duration, err error) {
	attrs := []any{
		"verb", verb, "container", c.args.ContainerID, "pod", c.pod.String(),
		"ifname", c.args.IfName, "duration", took.Round(time.Microsecond),
	}
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
