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
	"time"
	"unicode"

	"github.com/rdma-chain/rdma-chain/pkg/rdma"
)

// Version is the record format version written by Put. Get and List refuse
// records with a newer version. The record's schema, every type Put
// encodes, lives in this package: its JSON names are what released
// binaries wrote, and testdata/records holds them (TestGoldenRecords).
const Version = 1

// ErrNotFound is returned (wrapped) by Get when no record exists for a key.
var ErrNotFound = errors.New("attachment state not found")

const (
	attachDirName = "attachments"
	quarDirName   = "quarantine"
	lockFileName  = "lock"
	tmpPrefix     = ".tmp-"
	probePrefix   = ".probe-"
	recordSuffix  = ".json"
	maxPrefixLen  = 40
	hashHexLen    = 32
	dirMode       = 0o700
	fileMode      = 0o600
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
	Device string   `json:"device"` // RDMA device name, e.g. rxe0, erdma_0, mlx5_1
	Kind   LinkKind `json:"kind"`
	// HostLink is the netdev's host identity (for a child: HostName is the
	// parent, PodName and MAC the child's), flattened into the record.
	HostLink
	RDMAMoved bool `json:"rdmaMoved,omitempty"` // exclusive: RDMA device is in the pod netns
	// SoftRoCE says that Device is a soft-RoCE (rxe) device made, or being
	// made, on the child PodName inside the pod netns (podSoftRoCE); the
	// release deletes it before the child.
	SoftRoCE bool     `json:"softRoCE,omitempty"`
	IPAM     bool     `json:"ipam,omitempty"` // an IPAM lease was (or is being) taken for PodName
	IPs      []string `json:"ips,omitempty"`  // CIDRs the IPAM gave PodName
	// IPAMRange is the IPv6 block podIPv6Block rendered for this link at
	// ADD (its netdev's /64 and the block's host bits): the range its lease
	// is taken from and released with.
	IPAMRange string `json:"ipamRange,omitempty"`
	// PodNetnsID and PodIndex name a shared-mode child from the host
	// netns: the host netns's nsid of the pod netns and the child's
	// ifindex there, recorded once the child exists. A release finds the
	// child through them, whatever its netns path names. Nil: not recorded
	// (a record of an earlier release, or a child not made yet): the
	// release deletes the child by name in the netns at the path.
	PodNetnsID *int32 `json:"podNetnsId,omitempty"`
	PodIndex   int    `json:"podIndex,omitempty"`
	Step       Step   `json:"step"` // progress marker written before/after each host change
}

// HostLink is a netdev's host-side identity, recorded before it moves so
// it can be restored exactly and found again among look-alikes.
type HostLink struct {
	HostName   string   `json:"hostName"`             // name in the host netns before the move
	PodName    string   `json:"podName,omitempty"`    // name in the pod netns
	MAC        string   `json:"mac,omitempty"`        // hardware address, lower-case colon form
	HostIndex  int      `json:"hostIndex,omitempty"`  // ifindex in the host netns before the move
	MTU        int      `json:"mtu,omitempty"`        // MTU before the move
	WasUp      bool     `json:"wasUp,omitempty"`      // administratively up before the move
	HostAddrs  []string `json:"hostAddrs,omitempty"`  // CIDRs the netdev had on the host (see netdev's keepAddr)
	HostRoutes []Route  `json:"hostRoutes,omitempty"` // routes through it the kernel does not re-create
	// What identifies it besides name and MAC, which bond slaves, VLANs and
	// macvlans share (see netdev's findInHost).
	HostNetns uint64 `json:"hostNetns,omitempty"` // SO_NETNS_COOKIE of the host netns HostIndex belongs to
	PermMAC   string `json:"permMAC,omitempty"`   // permanent address (IFLA_PERM_ADDRESS), if the device has one
	LinkKind  string `json:"linkKind,omitempty"`  // link kind (IFLA_INFO_KIND; "device" for a NIC)
}

// Route is a host route through a moved netdev that the kernel does not
// make again by itself: leaving the netns drops every route through a
// netdev, and the kernel only re-creates the prefix routes of its addresses.
type Route struct {
	Family   int    `json:"family"`
	Dst      string `json:"dst,omitempty"` // CIDR; empty: default route
	Gw       string `json:"gw,omitempty"`
	Src      string `json:"src,omitempty"`
	Table    int    `json:"table,omitempty"`
	Priority int    `json:"priority,omitempty"`
	Scope    uint8  `json:"scope,omitempty"`
	Protocol int    `json:"protocol,omitempty"`
}

// Record is everything the plugin needs to remember about one attachment.
type Record struct {
	Version     int    `json:"version"`
	Network     string `json:"network"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
	NetNS       string `json:"netns,omitempty"`
	// NetNSIno is the inode of the pod netns at ADD (see netnsid.ID): it
	// tells the original netns from another one later found at NetNS.
	NetNSIno uint64 `json:"netnsIno,omitempty"`
	// NetNSCookie is the pod netns's SO_NETNS_COOKIE at ADD: unlike the
	// inode number, the kernel never gives it to another netns.
	NetNSCookie uint64 `json:"netnsCookie,omitempty"`
	// BootID is the kernel's boot id (ReadBootID) when ADD made the
	// record; "" when it was unreadable or the record older than the
	// field: the boot is then unknown (see BootOf).
	BootID     string    `json:"bootId,omitempty"`
	Pod        Pod       `json:"pod"`
	Mode       rdma.Mode `json:"mode,omitempty"` // the node's RDMA netns mode at ADD; "": pass-through
	CNIVersion string    `json:"cniVersion,omitempty"`
	Links      []Link    `json:"links,omitempty"`
	SMC        *SMC      `json:"smc,omitempty"`
	// DeviceInfo is the NPWG device-info file ADD writes, recorded before
	// it is written.
	DeviceInfo *DeviceInfo `json:"deviceInfo,omitempty"`
	// Claims are the DRA claim devices the pod's RDMA devices came from
	// (kubelet's pod-resources at ADD), each with the RDMA device it named.
	Claims    []Claim   `json:"claims,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	// StrandedAt is when an ADD first found the attachment's pod netns
	// gone while the kernel had not given its moved RDMA device back (a
	// process still holds the netns): ADDs leave it held from then on,
	// and the reconcile daemon gives it back once the kernel does.
	StrandedAt time.Time `json:"strandedAt,omitzero"`
}

// Claim is one device of a pod's DRA ResourceClaim and the node's RDMA
// device it maps to.
type Claim struct {
	Namespace  string `json:"namespace"` // the claim's
	Name       string `json:"name"`
	Driver     string `json:"driver"`
	Pool       string `json:"pool"`
	Device     string `json:"device"`            // the DRA device name
	ShareID    string `json:"shareID,omitempty"` // a share of a device with consumable capacity
	RDMADevice string `json:"rdmaDevice"`
}

// DeviceInfo names the device-info file of an attachment and the device it
// describes: DEL removes the file only while it holds what the plugin
// writes for that device.
type DeviceInfo struct {
	Path   string `json:"path"`
	Device string `json:"device"` // RDMA device name
	PCI    string `json:"pci"`    // its PCI address
	// Dirs are the folders ADD created for the file, outermost first: DEL
	// removes those that are empty.
	Dirs []string `json:"dirs,omitempty"`
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
	// Transparent is "bpf" while the pod's netns is listed in the SMC
	// socket hook (keyed by Record.NetNSIno), "tcp2smc" when the sysctl
	// was set, "" otherwise.
	Transparent string `json:"transparent,omitempty"`
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
	return &Store{dir: filepath.Clean(dir)}
}

// AttachmentsDir is the folder holding the records: a reader watches its
// modification time, which every Put and Delete moves.
func (s *Store) AttachmentsDir() string { return s.attachDir() }

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

// Put atomically writes r, setting r.Version to Version and r.CreatedAt to
// the current time if it is zero. The file is written to a temporary file in
// the same directory, synced, renamed into place, and the directory synced:
// the record survives a power loss. A record with an empty network,
// container ID or interface name is refused: it could never be read back.
func (s *Store) Put(r *Record) error { return s.put(r, true) }

// PutUnsynced writes r atomically like Put but does not wait for the disk:
// every later reader, including the next plugin call after this one was
// killed, sees the new record at once (it is in the page cache), while a
// power loss may bring back an older one or none. It is meant for records
// that guard only kernel state (netdevs, RDMA devices, children, pnet
// entries), which a power loss undoes as well.
func (s *Store) PutUnsynced(r *Record) error { return s.put(r, false) }

func (s *Store) put(r *Record, sync bool) error {
	if r == nil {
		return errors.New("put attachment state: nil record")
	}
	if err := checkKey(r.Key()); err != nil {
		return fmt.Errorf("put attachment state: %w", err)
	}
	r.Version = Version
	if r.CreatedAt.IsZero() {
		r.CreatedAt = time.Now().UTC()
	}
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode attachment record: %w", err)
	}
	if err := s.ensureAttachDir(); err != nil {
		return err
	}
	if err := writeAtomic(s.path(r.Key()), append(data, '\n'), sync); err != nil {
		return fmt.Errorf("write attachment record: %w", err)
	}
	return nil
}

// Get returns the record for k. It returns an error wrapping ErrNotFound when
// no record exists, a *CorruptError when the file at the record's path cannot
// be read as the record of k, and ErrUnsafePath when the state directory or
// attachments/ is a symbolic link or not a directory.
func (s *Store) Get(k Key) (*Record, error) {
	notFound := fmt.Errorf("%w: network %q container %q interface %q",
		ErrNotFound, k.Network, k.ContainerID, k.IfName)
	exists, err := s.checkAttachDir()
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, notFound
	}
	r, err := readRecord(s.path(k), &k)
	if errors.Is(err, os.ErrNotExist) {
		return nil, notFound
	}
	return r, err
}

// Delete removes the record for k. Deleting an absent record is not an error.
// A symbolic link at the record path is removed, not followed. The removal
// is not synced: a record that a power loss brings back names a pod netns
// that died with the kernel, the stale attachment GC, reconcile and
// exclusive mode's reclaim already release; its leases are released by
// container ID, which no other pod has.
func (s *Store) Delete(k Key) error {
	exists, err := s.checkAttachDir()
	if err != nil || !exists {
		return err
	}
	err = os.Remove(s.path(k))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("delete attachment record: %w", err)
	}
	return nil
}

// Exists reports, without the node lock, whether anything is at the path
// of k's record (a record, or a file that would read as corrupt). It is
// false, with no error, when the state directory or attachments/ is
// missing. Only a false answer is final: a caller that finds something
// reads it under the lock. Like Lock, it fails with ErrUnsafePath when the
// lock file is a symbolic link or of the wrong type, so that a caller that
// ends on a false answer refuses the same layouts as one that locks.
func (s *Store) Exists(k Key) (bool, error) {
	if err := checkDir(s.dir); absent(err) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("attachment state: %w", err)
	}
	lock := filepath.Join(s.dir, lockFileName)
	if fi, err := os.Lstat(lock); err == nil && !fi.Mode().IsRegular() {
		return false, fmt.Errorf("%w: lock file %s is not a regular file (%v)", ErrUnsafePath, lock, fi.Mode().Type())
	}
	exists, err := s.checkAttachDir()
	if err != nil || !exists {
		return false, err
	}
	_, err = os.Lstat(s.path(k))
	if absent(err) {
		return false, nil
	}
	return err == nil, err
}

// List returns all readable records sorted by file name. Files named like
// records that cannot be read as one are skipped, and their errors (each a
// *CorruptError, or an I/O error) are returned joined alongside the good
// records. Hidden files (temporary files, probes) are ignored. A missing
// state directory yields no records and no error.
func (s *Store) List() ([]*Record, error) {
	exists, err := s.checkAttachDir()
	if err != nil || !exists {
		return nil, err
	}
	entries, err := os.ReadDir(s.attachDir())
	if err != nil {
		return nil, fmt.Errorf("list attachment records: %w", err)
	}
	var recs []*Record
	var errs []error
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, ".") || !strings.HasSuffix(n, recordSuffix) {
			continue
		}
		r, err := readRecord(filepath.Join(s.attachDir(), n), nil)
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted since ReadDir
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		recs = append(recs, r)
	}
	return recs, errors.Join(errs...)
}
