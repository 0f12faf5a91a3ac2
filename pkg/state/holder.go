package state

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// lockHolders returns the pids holding a flock on the file open as f, as
// /proc/locks lists them (pids of the reader's pid namespace), for the
// message of a lock timeout. It returns nil when they cannot be told.
func lockHolders(f *os.File) []string {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil
	}
	id := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	locks, err := os.Open("/proc/locks")
	if err != nil {
		return nil
	}
	defer locks.Close()
	var pids []string
	sc := bufio.NewScanner(locks)
	for sc.Scan() {
		// "1: FLOCK  ADVISORY  WRITE 1234 fe:00:395600 0 EOF"; waiters
		// carry "->" after the index and are not holders.
		fields := strings.Fields(sc.Text())
		if len(fields) >= 6 && fields[1] == "FLOCK" && fields[5] == id {
			pids = append(pids, fields[4])
		}
	}
	return pids
}
