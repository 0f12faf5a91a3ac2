package chain

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/rdma-chain/rdma-chain/pkg/config"
	"github.com/rdma-chain/rdma-chain/pkg/podres"
)

// The CDI devices of rdma-chain-dra (pkg/dra, which the plugin does not
// link): kind vendor/class, one spec file per prepared claim named after
// the claim's UID, one device per DRA device named <claim UID>-<device>.
const (
	cdiKind       = config.DefaultDRADriver + "/rdma"
	cdiIDPrefix   = cdiKind + "="
	cdiFilePrefix = config.DefaultDRADriver + "-"
	// maxCDISpec bounds the bytes of one spec file read.
	maxCDISpec = 1 << 20
	// uuidLen is the length of a claim UID: 8-4-4-4-12 hex digits.
	uuidLen = 36
)

// cdiSpec is the part of a CDI spec file (specs-go v1.1.0's Spec and
// Device, which the plugin does not link) ADD reads; every other field of
// the format is accepted as JSON and never used.
type cdiSpec struct {
	Version        string            `json:"cdiVersion"`
	Kind           string            `json:"kind"`
	Annotations    map[string]string `json:"annotations,omitempty"`
	Devices        []cdiDevice       `json:"devices"`
	ContainerEdits json.RawMessage   `json:"containerEdits,omitempty"`
}

// cdiDevice is one device of a cdiSpec.
type cdiDevice struct {
	Name           string            `json:"name"`
	Annotations    map[string]string `json:"annotations,omitempty"`
	ContainerEdits json.RawMessage   `json:"containerEdits,omitempty"`
}

// claimCDIName is the CDI device name of pkg/dra's device that kubelet
// reports for d, split into the claim's UID and the device name; ok is
// false when d names no CDI device of cdiKind (a driver that wrote none).
// A CDI ID of cdiKind that is not <UUID>-<d.Device>, or two of them, is an
// error: kubelet reports what the driver prepared, which names d.
func claimCDIName(d podres.ClaimDevice) (uid, name string, ok bool, err error) {
	for _, id := range d.CDIDevices {
		n, found := strings.CutPrefix(id, cdiIDPrefix)
		switch {
		case !found:
			continue
		case ok && n != name:
			return "", "", false, fmt.Errorf("two CDI devices of kind %s: %q and %q", cdiKind, truncate(name), truncate(n))
		case len(n) <= uuidLen+1 || n[uuidLen] != '-' || !isUUID(n[:uuidLen]) || n[uuidLen+1:] != d.Device:
			return "", "", false, fmt.Errorf("CDI device %q is not <claim UID>-%s", truncate(id), truncate(d.Device))
		}
		uid, name, ok = n[:uuidLen], n, true
	}
	return uid, name, ok, nil
}

// isUUID reports whether s is a UUID in Kubernetes' form: 8-4-4-4-12
// lower-case hex digits.
func isUUID(s string) bool {
	if len(s) != uuidLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return false
			}
		}
	}
	return true
}

// cdiSpecPath is the spec file of claim uid under dir, as pkg/dra names it.
func cdiSpecPath(dir, uid string) string {
	return filepath.Join(dir, cdiFilePrefix+uid+".json")
}

// readCDISpec reads and decodes the spec file at path as untrusted input:
// a regular file opened without following a symbolic link or blocking on
// a FIFO, at most maxCDISpec bytes, one JSON object of the format's
// fields (an unknown key is an error) of kind cdiKind, device names unique.
func readCDISpec(path string) (*cdiSpec, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("%s is a symbolic link", path)
		}
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxCDISpec+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxCDISpec {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxCDISpec)
	}
	spec, err := decodeCDISpec(b)
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", path, err)
	}
	return spec, nil
}

// decodeCDISpec decodes b strictly (see readCDISpec). Keys are matched
// exactly: encoding/json alone would take "Kind" for "kind".
func decodeCDISpec(b []byte) (*cdiSpec, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	var top map[string]json.RawMessage
	if err := dec.Decode(&top); err != nil {
		return nil, fmt.Errorf("not a CDI spec: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("not a CDI spec: data after its object")
	}
	if err := exactKeys(top, "", "cdiVersion", "kind", "annotations", "devices", "containerEdits"); err != nil {
		return nil, err
	}
	var devs []map[string]json.RawMessage
	if err := json.Unmarshal(top["devices"], &devs); err != nil && top["devices"] != nil {
		return nil, fmt.Errorf("not a CDI spec: devices: %w", err)
	}
	for i, d := range devs {
		if err := exactKeys(d, fmt.Sprintf("devices[%d].", i), "name", "annotations", "containerEdits"); err != nil {
			return nil, err
		}
	}
	var spec cdiSpec
	if err := json.Unmarshal(b, &spec); err != nil {
		return nil, fmt.Errorf("not a CDI spec: %w", err)
	}
	if spec.Kind != cdiKind {
		return nil, fmt.Errorf("kind %q, want %s", truncate(spec.Kind), cdiKind)
	}
	seen := make(map[string]bool, len(spec.Devices))
	for _, d := range spec.Devices {
		if seen[d.Name] {
			return nil, fmt.Errorf("device %q listed twice", truncate(d.Name))
		}
		seen[d.Name] = true
	}
	return &spec, nil
}

// exactKeys fails for a key of obj (at path) not among known, compared
// exactly.
func exactKeys(obj map[string]json.RawMessage, path string, known ...string) error {
	for k := range obj {
		if !slices.Contains(known, k) {
			return fmt.Errorf("not a CDI spec: unknown field %q", path+truncate(k))
		}
	}
	return nil
}

// device returns the spec's device named name.
func (s *cdiSpec) device(name string) (cdiDevice, bool) {
	for _, d := range s.Devices {
		if d.Name == name {
			return d, true
		}
	}
	return cdiDevice{}, false
}
