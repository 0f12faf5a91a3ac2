package rdma

import (
	"fmt"
)

// NetnsMode reads the RDMA netns mode. It returns an error wrapping
// ErrNoRDMA when the kernel has no RDMA subsystem.
func (s *System) NetnsMode() (Mode, error) {
	raw, err := s.nl().SystemGetNetnsMode()
	if err != nil {
		if isNoRDMA(err) {
			return "", noRDMA("read RDMA netns mode", err)
		}
		return "", fmt.Errorf("read RDMA netns mode: %w", err)
	}
	return parseMode(raw)
}

// parseMode turns the netlink mode string into a Mode.
func parseMode(raw string) (Mode, error) {
	switch m := Mode(raw); m {
	case ModeShared, ModeExclusive:
		return m, nil
	default:
		return "", fmt.Errorf("unknown RDMA netns mode %q", raw)
	}
}
