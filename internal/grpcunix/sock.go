package grpcunix

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// sock is a blocking unix stream socket. The call uses raw system calls
// rather than package net: net's dialer and runtime poller cost a fresh
// process 0.3 ms of a lookup (measured), for one connection that only ever
// reads after it writes.
//
// ctx bounds it twice: the socket's send and receive timeouts are set to
// its deadline, and ctx's end (deadline or cancel) shuts the socket down,
// which wakes a blocked read or write at once.
type sock struct {
	fd     int
	mu     sync.Mutex // orders the shutdown on ctx's end against Close
	closed bool
	stop   func() bool
}

func dialUnix(ctx context.Context, path string) (*sock, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	s := &sock{fd: fd}
	if dl, ok := ctx.Deadline(); ok {
		tv := unix.NsecToTimeval(max(time.Until(dl), time.Microsecond).Nanoseconds())
		for _, opt := range []int{unix.SO_RCVTIMEO, unix.SO_SNDTIMEO} {
			if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, opt, &tv); err != nil {
				unix.Close(fd)
				return nil, os.NewSyscallError("setsockopt", err)
			}
		}
	}
	s.stop = context.AfterFunc(ctx, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.closed {
			_ = unix.Shutdown(s.fd, unix.SHUT_RDWR)
		}
	})
	// A connect to a full backlog waits, bounded by the send timeout.
	err = retryEINTR(func() error { return unix.Connect(fd, &unix.SockaddrUnix{Name: path}) })
	if err != nil {
		_ = s.Close()
		return nil, os.NewSyscallError("connect", timeout(err))
	}
	return s, nil
}

func (s *sock) Read(p []byte) (int, error) {
	var n int
	err := retryEINTR(func() (err error) { n, err = unix.Read(s.fd, p); return err })
	switch {
	case err != nil:
		return 0, os.NewSyscallError("read", timeout(err))
	case n == 0 && len(p) > 0:
		return 0, io.EOF
	}
	return n, nil
}

func (s *sock) Write(p []byte) (int, error) {
	written := 0
	for written < len(p) {
		var n int
		err := retryEINTR(func() (err error) { n, err = unix.Write(s.fd, p[written:]); return err })
		if err != nil {
			return written, os.NewSyscallError("write", timeout(err))
		}
		written += n
	}
	return written, nil
}

func (s *sock) Close() error {
	s.stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return unix.Close(s.fd)
}

// retryEINTR repeats a system call a signal interrupted: Go's runtime
// signals its threads, and with a socket timeout set the kernel does not
// restart the call itself.
func retryEINTR(call func() error) error {
	for {
		if err := call(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// timeout reads EAGAIN on a blocking socket as what it is there: the
// socket's timeout expired.
func timeout(err error) error {
	if errors.Is(err, unix.EAGAIN) {
		return os.ErrDeadlineExceeded
	}
	return err
}
