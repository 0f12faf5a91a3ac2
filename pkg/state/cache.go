package state

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// maxCacheSize bounds a cache file: they hold a few hundred bytes.
const maxCacheSize = 64 << 10

// ReadCache returns the content of the cache file name in the state
// directory when it was written less than maxAge ago (and not in the
// future); false when it is missing, older, or not a regular file of at
// most 64 KiB. Cache files keep what a verb may reuse for a while, such
// as STATUS's view of the kernel's SMC.
func (s *Store) ReadCache(name string, maxAge time.Duration) ([]byte, bool) {
	if !cacheName(name) {
		return nil, false
	}
	path := filepath.Join(s.dir, name)
	data, mtime, err := readRegularSmall(path, maxCacheSize)
	if err != nil {
		return nil, false
	}
	age := time.Since(mtime)
	return data, age >= 0 && age < maxAge
}

// WriteCache replaces the cache file name with data (not synced: a cache
// lost to a crash is read again).
func (s *Store) WriteCache(name string, data []byte) error {
	if !cacheName(name) || len(data) > maxCacheSize {
		return fmt.Errorf("cache file %q: bad name or larger than %d bytes", name, maxCacheSize)
	}
	if err := s.ensureDir(); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(s.dir, name), data, false)
}

// cacheName accepts "cache-NAME" without path separators or dots leading.
func cacheName(name string) bool {
	return strings.HasPrefix(name, "cache-") && !strings.ContainsAny(name, "/\x00") && len(name) <= 64
}
