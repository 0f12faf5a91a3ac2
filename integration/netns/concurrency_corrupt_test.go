package netns

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"
)

// corruptRecords damages the records under dataDir until stop closes, the
// way a failing disk or a careless operator would: garbage written into a
// record, a record replaced by a directory, stray temp files and garbage
// records under names of their own. It returns how many it damaged.
func corruptRecords(dataDir string, stop <-chan struct{}) int {
	rng := rand.New(rand.NewPCG(42, 42))
	dir := filepath.Join(dataDir, "attachments")
	damaged := 0
	for i := 0; ; i++ {
		select {
		case <-stop:
			return damaged
		case <-time.After(20 * time.Millisecond):
		}
		records, _ := filepath.Glob(filepath.Join(dir, "*.json"))
		if len(records) == 0 {
			continue
		}
		victim := records[rng.IntN(len(records))]
		var err error
		switch i % 5 {
		case 0:
			err = os.WriteFile(victim, []byte(`{"version":1,"network":"rdma`), 0o600)
		case 1:
			err = os.WriteFile(victim, []byte{0, 0xff, 0xfe, '{', 0x80}, 0o600)
		case 2:
			if err = os.Remove(victim); err == nil {
				err = os.Mkdir(victim, 0o700)
			}
		case 3:
			err = os.WriteFile(filepath.Join(dir, fmt.Sprintf(".tmp-%d", i)), []byte("{"), 0o600)
		case 4:
			err = os.WriteFile(filepath.Join(dir, fmt.Sprintf("planted-%d.json", i)), []byte("[]"), 0o600)
		}
		if err == nil {
			damaged++
		}
	}
}
