// Package state persists one record per CNI attachment on the node so that
// DEL, CHECK and GC can undo exactly what ADD did, even after a crash. Records
// are JSON files written atomically under <dir>/attachments/, and a node-wide
// flock on <dir>/lock serialises concurrent plugin processes.
package state

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode"

	"golang.org/x/sys/unix"

	"github.com/rdma-chain/rdma-chain/pkg/netdev"
)

// Version is the record format version written by Put. Get and List refuse
// records with a newer version.
const Version = 1

// ErrNotFound is returned (wrapped) by Get when no record exists for a key.
var ErrNotFound = errors.New("attachment state not found")

const (
	attachDirName = "attachments"
	lockFileName  = "lock"
	tmpPattern    = ".tmp-*"
	recordSuffix  = ".json"
	maxPrefixLen  = 40
	hashHexLen    = 32
	dirMode       = 0o700
)

// Key identifies one attachment: the CNI network name, container ID and
// interface name, as passed by the runtime.
type Key struct {
	Network, ContainerID, IfName string
}

// Pod holds the Kubernetes identity of the pod, when known.
type Pod struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	UID       string `json:"uid,omitempty"`
}

// Link is one RDMA netdev/device given to the pod.
type Link struct {
	Device string `json:"device"` // RDMA device name, e.g. rxe0, erdma_0, mlx5_1
	Kind   string `json:"kind"`   // "moved" (exclusive) | "ipvlan" | "macvlan" | "none"
	// HostLink is the netdev's host identity (for a child: HostName is the
	// parent, PodName and MAC the child's), flattened into the record.
	netdev.HostLink
	RDMAMoved bool     `json:"rdmaMoved,omitempty"` // exclusive: RDMA device is in the pod netns
	IPAM      bool     `json:"ipam,omitempty"`      // an IPAM lease was (or is being) taken for PodName
	IPs       []string `json:"ips,omitempty"`       // CIDRs the IPAM gave PodName
	Step      string   `json:"step"`                // progress marker written before/after each host change
}

// Record is everything the plugin needs to remember about one attachment.
type Record struct {
	Version     int       `json:"version"`
	Network     string    `json:"network"`
	ContainerID string    `json:"containerID"`
	IfName      string    `json:"ifName"`
	NetNS       string    `json:"netns,omitempty"`
	Pod         Pod       `json:"pod"`
	Mode        string    `json:"mode,omitempty"` // "exclusive" | "shared" | "" (pass-through)
	CNIVersion  string    `json:"cniVersion,omitempty"`
	Links       []Link    `json:"links,omitempty"`
	SMC         *SMC      `json:"smc,omitempty"`
	CreatedAt   time.Time `json:"createdAt"`
}

// SMC is the SMC-R pnet table state of an annotated pod.
type SMC struct {
	PnetID    string `json:"pnetId"`
	Device    string `json:"device"`              // RDMA device of the init_net entry
	IBPort    uint8  `json:"ibPort"`              // its port
	PodIfName string `json:"podIfName"`           // the pod's primary interface of the pod entry
	HostEntry bool   `json:"hostEntry,omitempty"` // the init_net entry is ensured (counts toward its references)
	HostOwned bool   `json:"hostOwned,omitempty"` // the plugin wrote the init_net entry (removes it with its last reference)
	PodEntry  bool   `json:"podEntry,omitempty"`  // the pod-netns entry is written
}

// Key returns the attachment key of the record.
func (r *Record) Key() Key {
	return Key{Network: r.Network, ContainerID: r.ContainerID, IfName: r.IfName}
}

// Store reads and writes records under one state directory.
type Store struct {
	dir string
}

// New returns a Store rooted at dir. It creates nothing on disk.
func New(dir string) *Store {
	return &Store{dir: dir}
}

// Dir returns the state directory.
func (s *Store) Dir() string {
	return s.dir
}

func (s *Store) attachDir() string {
	return filepath.Join(s.dir, attachDirName)
}

func (s *Store) path(k Key) string {
	return filepath.Join(s.attachDir(), fileName(k))
}

// fileName derives a file name from an untrusted key. The name is a single
// path element made of [A-Za-z0-9_.-] that never starts with a dot, and the
// hash of the length-prefixed fields keeps distinct keys distinct.
func fileName(k Key) string {
	h := sha256.New()
	for _, f := range []string{k.Network, k.ContainerID, k.IfName} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	sum := hex.EncodeToString(h.Sum(nil))[:hashHexLen]
	if p := sanitize(k.ContainerID); p != "" {
		return p + "-" + sum + recordSuffix
	}
	return sum + recordSuffix
}

func sanitize(s string) string {
	p := strings.Map(func(r rune) rune {
		if r < 0x80 && (unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("_.-", r)) {
			return r
		}
		return -1
	}, s)
	return strings.TrimLeft(p[:min(len(p), maxPrefixLen)], ".")
}

// Lock takes an exclusive flock on <dir>/lock, creating the directory (0700)
// and lock file (0600) if needed. It blocks until the lock is held. The
// returned unlock function is idempotent.
func (s *Store) Lock() (unlock func(), err error) {
	if err := os.MkdirAll(s.dir, dirMode); err != nil {
		return nil, fmt.Errorf("creating state directory: %w", err)
	}
	name := filepath.Join(s.dir, lockFileName)
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening state lock: %w", err)
	}
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
	for errors.Is(err, unix.EINTR) {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", name, err)
	}
	// Closing the only descriptor of the open file releases the flock.
	return sync.OnceFunc(func() { _ = f.Close() }), nil
}

// Put atomically writes r, setting r.Version to Version and r.CreatedAt to
// the current time if it is zero. The file is written to a temporary file in
// the same directory, synced, renamed into place, and the directory synced.
func (s *Store) Put(r *Record) error {
	if r == nil {
		return errors.New("put attachment state: nil record")
	}
	r.Version = Version
	if r.CreatedAt.IsZero() {
		r.CreatedAt = time.Now().UTC()
	}
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding attachment record: %w", err)
	}
	if err = os.MkdirAll(s.attachDir(), dirMode); err == nil {
		err = writeAtomic(s.path(r.Key()), append(data, '\n'))
	}
	if err != nil {
		return fmt.Errorf("writing attachment record: %w", err)
	}
	return nil
}

// writeTemp writes data to a new synced temp file (mode 0600) in dir and
// returns its name. On failure nothing is left behind.
func writeTemp(dir string, data []byte) (string, error) {
	f, err := os.CreateTemp(dir, tmpPattern)
	if err != nil {
		return "", err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err != nil {
		_ = os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// writeAtomic replaces name with data via a synced temp file and rename.
func writeAtomic(name string, data []byte) error {
	tmp, err := writeTemp(filepath.Dir(name), data)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, name); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(name))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Get returns the record for k. It returns an error wrapping ErrNotFound when
// no record exists, and an error naming the file when it is corrupt or was
// written by a newer format version.
func (s *Store) Get(k Key) (*Record, error) {
	r, err := readRecord(s.path(k))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: network %q container %q interface %q",
			ErrNotFound, k.Network, k.ContainerID, k.IfName)
	}
	return r, err
}

func readRecord(name string) (*Record, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("reading attachment record: %w", err)
	}
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("decoding attachment record %s: %w", name, err)
	}
	if r.Version > Version {
		return nil, fmt.Errorf("attachment record %s has version %d, newer than supported version %d",
			name, r.Version, Version)
	}
	return &r, nil
}

// Delete removes the record for k. Deleting an absent record is not an error.
func (s *Store) Delete(k Key) error {
	err := os.Remove(s.path(k))
	if err == nil {
		err = syncDir(s.attachDir())
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("deleting attachment record: %w", err)
	}
	return nil
}

// List returns all readable records sorted by file name. Unreadable, corrupt
// or too-new files are skipped; their errors are returned joined alongside
// the good records. A missing state directory yields no records and no error.
func (s *Store) List() ([]*Record, error) {
	entries, err := os.ReadDir(s.attachDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing attachment records: %w", err)
	}
	var recs []*Record
	var errs []error
	for _, e := range entries {
		n := e.Name()
		if !e.Type().IsRegular() || strings.HasPrefix(n, ".") || !strings.HasSuffix(n, recordSuffix) {
			continue
		}
		r, err := readRecord(filepath.Join(s.attachDir(), n))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		recs = append(recs, r)
	}
	return recs, errors.Join(errs...)
}

// Writable reports whether records can be written: the state directory can
// be created and a temporary file written, synced and removed. It is meant
// for CNI STATUS.
func (s *Store) Writable() error {
	dir := s.attachDir()
	err := os.MkdirAll(dir, dirMode)
	var tmp string
	if err == nil {
		tmp, err = writeTemp(dir, []byte("{}\n"))
	}
	if err == nil {
		err = os.Remove(tmp)
	}
	if err != nil {
		return fmt.Errorf("state directory not writable: %w", err)
	}
	return nil
}
