package validate

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// MaxFileSize bounds the conflist validate reads: runtimes' conflists are
// a few KiB.
const MaxFileSize = 1 << 20

// ReadFile reads the conflist at path: a regular file of at most
// MaxFileSize bytes. A FIFO or device (which would block the read or never
// end) and a larger file are refused before their content is read.
func ReadFile(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	st, err := f.Stat()
	switch {
	case err != nil:
		return nil, err
	case !st.Mode().IsRegular():
		return nil, errors.New("not a regular file")
	case st.Size() > MaxFileSize:
		return nil, fmt.Errorf("%d bytes, more than a conflist's %d", st.Size(), MaxFileSize)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err == nil && len(data) > MaxFileSize {
		err = fmt.Errorf("more than a conflist's %d bytes", MaxFileSize)
	}
	return data, err
}
