package conflist

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containernetworking/cni/libcni"
)

// Auto is the --conflist value that names the primary's conflist.
const Auto = "auto"

// ErrNoConflist means the conf dir holds no file a runtime would read.
var ErrNoConflist = errors.New("no conflist")

// Primary returns the conflist a runtime uses from dir, as containerd,
// CRI-O and Multus's auto mode choose it: the lexically first file named
// *.conf, *.conflist or *.json. When that file is a symlink or not a
// regular file it is refused, never followed or skipped: the runtime
// would use it. When it is Multus's, the primary network is what Multus
// delegates to (throughMultus). ErrNoConflist when there is none.
func Primary(dir string) (string, error) {
	files, err := libcni.ConfFiles(dir, []string{".conf", ".conflist", ".json"})
	if err != nil {
		return "", fmt.Errorf("conflist directory %s: %w", dir, err)
	}
	if len(files) == 0 {
		return "", fmt.Errorf("%w in %s (*.conf, *.conflist, *.json)", ErrNoConflist, dir)
	}
	first := files[0]
	st, err := os.Lstat(first)
	switch {
	case err != nil:
		return "", err
	case st.Mode()&os.ModeSymlink != 0:
		return "", fmt.Errorf("refusing %s, the first conflist of %s: it is a symlink", first, filepath.Clean(dir))
	case !st.Mode().IsRegular():
		return "", fmt.Errorf("refusing %s, the first conflist of %s: not a regular file", first, filepath.Clean(dir))
	}
	data, _, err := ReadNoFollow(first)
	if err != nil {
		return first, nil // reading it again says what is wrong
	}
	return throughMultus(dir, first, data)
}

// WaitPrimary polls for dir's primary conflist for at most d (the primary
// plugin's agent writes it once it runs). A Multus file it refuses is
// waited out too, so that an init container that cannot go on stays
// rather than restarts at once; refused reports it once, as soon as it is
// seen (nil: not reported).
func WaitPrimary(dir string, d time.Duration, refused func(error)) (string, error) {
	deadline := time.Now().Add(d)
	reported := false
	for {
		p, err := Primary(dir)
		if errors.Is(err, ErrMultus) && !reported && refused != nil && time.Now().Before(deadline) {
			refused(err)
			reported = true
		}
		waiting := errors.Is(err, ErrNoConflist) || errors.Is(err, ErrMultus)
		if !waiting || !time.Now().Before(deadline) {
			if err != nil && d > 0 && waiting {
				return "", fmt.Errorf("%w after %v", err, d)
			}
			return p, err
		}
		time.Sleep(min(time.Second, time.Until(deadline)))
	}
}

// Remove returns data without the rdma-chain entry, every other byte
// kept, and whether there was one.
func Remove(data []byte) ([]byte, bool, error) {
	_, plugins, err := Plugins(data)
	if err != nil {
		return nil, false, err
	}
	at := EntryIndex(plugins)
	if at < 0 {
		return data, false, nil
	}
	return removeElem(data, plugins, at), true, nil
}
