package rdmares

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Kind is a kind of tracked object, named as `rdma resource show` names it.
type Kind string

// The kinds read here.
const (
	QP Kind = "qp"
	CQ Kind = "cq"
	MR Kind = "mr"
	PD Kind = "pd"
)

// Kinds are the kinds read here, in the order they are reported.
var Kinds = []Kind{QP, CQ, MR, PD}

// Entry is one tracked object of a device.
type Entry struct {
	Kind     Kind
	Device   string // the RDMA device's name
	ID       uint32 // the QP number, or the CQ, MR or PD restrack id
	PID      uint32 // the owner in the reader's pid namespace; 0: kernel-owned or its task is gone
	KernName string // the owning kernel module or subsystem of a kernel object
	MRBytes  uint64 // an MR's registered length
}

// Kernel reports whether the kernel owns the object.
func (e Entry) Kernel() bool { return e.KernName != "" }

// RDMA netlink command and attribute numbers of
// include/uapi/rdma/rdma_netlink.h (enum rdma_nldev_command and
// rdma_nldev_attr) that vishvananda/netlink/nl lacks.
const (
	cmdResQPGet = 10
	cmdResCQGet = 12
	cmdResMRGet = 13
	cmdResPDGet = 14

	attrDevIndex = 1
	attrDevName  = 2
	attrResQP    = 19
	attrQPEntry  = 20
	attrLQPN     = 21
	attrPID      = 28
	attrKernName = 29
	attrResCQ    = 35
	attrCQEntry  = 36
	attrResMR    = 40
	attrMREntry  = 41
	attrMRLen    = 45
	attrResPD    = 46
	attrPDEntry  = 47
	attrPDN      = 60
	attrCQN      = 61
	attrMRN      = 62

	// nlaTypeMask drops NLA_F_NESTED and NLA_F_NET_BYTEORDER.
	nlaTypeMask = 0x3fff
)

// kindAttrs are a kind's dump command, table, entry and id attributes.
type kindAttrs struct{ cmd, table, entry, id uint16 }

var attrsOf = map[Kind]kindAttrs{
	QP: {cmdResQPGet, attrResQP, attrQPEntry, attrLQPN},
	CQ: {cmdResCQGet, attrResCQ, attrCQEntry, attrCQN},
	MR: {cmdResMRGet, attrResMR, attrMREntry, attrMRN},
	PD: {cmdResPDGet, attrResPD, attrPDEntry, attrPDN},
}

// ErrMalformed is wrapped by every error of a reply that does not parse.
var ErrMalformed = errors.New("malformed RDMA resource reply")

func malformed(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, a...))
}

// ParseReply parses the payload (after the netlink header) of one message
// of a RES dump of kind for the device with index dev. The message must
// name that device once by index and name and carry the kind's table
// once; each entry must carry its id once, and an MR its length. The
// attributes read must have their exact sizes and strings their NUL;
// attributes not read (the kernel adds some in new releases) are skipped.
func ParseReply(kind Kind, dev uint32, msg []byte) ([]Entry, error) {
	ka, ok := attrsOf[kind]
	if !ok {
		return nil, fmt.Errorf("unknown RDMA resource kind %q", kind)
	}
	attrs, err := parseAttrs(msg)
	if err != nil {
		return nil, err
	}
	var index, name, table []byte
	for _, a := range attrs {
		switch a.typ {
		case attrDevIndex:
			err = once(&index, a, "device index")
		case attrDevName:
			err = once(&name, a, "device name")
		case ka.table:
			err = once(&table, a, string(kind)+" table")
		}
		if err != nil {
			return nil, err
		}
	}
	if index == nil || name == nil || table == nil {
		return nil, malformed("a %s reply lacks the device index, name or table", kind)
	}
	gotDev, err := u32(index, "device index")
	if err != nil {
		return nil, err
	}
	if gotDev != dev {
		return nil, malformed("a %s reply for device %d names device %d", kind, dev, gotDev)
	}
	devName, err := str(name, "device name")
	if err != nil {
		return nil, err
	}
	return parseTable(kind, ka, devName, table)
}

// parseTable parses a kind's table: entries only.
func parseTable(kind Kind, ka kindAttrs, dev string, table []byte) ([]Entry, error) {
	attrs, err := parseAttrs(table)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(attrs))
	for _, a := range attrs {
		if a.typ != ka.entry {
			return nil, malformed("attribute %d in the %s table", a.typ, kind)
		}
		e, err := parseEntry(kind, ka, a.val)
		if err != nil {
			return nil, err
		}
		e.Device = dev
		out = append(out, e)
	}
	return out, nil
}

// parseEntry parses one object's attributes.
func parseEntry(kind Kind, ka kindAttrs, b []byte) (Entry, error) {
	attrs, err := parseAttrs(b)
	if err != nil {
		return Entry{}, err
	}
	var id, pid, kern, mrLen []byte
	for _, a := range attrs {
		switch a.typ {
		case ka.id:
			err = once(&id, a, string(kind)+" id")
		case attrPID:
			err = once(&pid, a, "pid")
		case attrKernName:
			err = once(&kern, a, "kernel owner")
		case attrMRLen:
			if kind == MR {
				err = once(&mrLen, a, "MR length")
			}
		}
		if err != nil {
			return Entry{}, err
		}
	}
	e := Entry{Kind: kind}
	if id == nil {
		return Entry{}, malformed("a %s entry without its id", kind)
	}
	if e.ID, err = u32(id, string(kind)+" id"); err != nil {
		return Entry{}, err
	}
	if pid != nil && kern != nil {
		return Entry{}, malformed("a %s entry with both a pid and a kernel owner", kind)
	}
	if pid != nil {
		if e.PID, err = u32(pid, "pid"); err != nil {
			return Entry{}, err
		}
		if e.PID == 0 {
			return Entry{}, malformed("a %s entry with pid 0", kind)
		}
	}
	if kern != nil {
		if e.KernName, err = str(kern, "kernel owner"); err != nil {
			return Entry{}, err
		}
		if e.KernName == "" {
			return Entry{}, malformed("a %s entry with an empty kernel owner", kind)
		}
	}
	if kind == MR {
		if mrLen == nil {
			return Entry{}, malformed("an MR entry without its length")
		}
		if e.MRBytes, err = u64(mrLen, "MR length"); err != nil {
			return Entry{}, err
		}
	}
	return e, nil
}

type attr struct {
	typ uint16
	val []byte
}

// parseAttrs splits b into netlink attributes: each header's length covers
// at least the header and fits in b, and the padding to 4 bytes is present
// except after the last one.
func parseAttrs(b []byte) ([]attr, error) {
	var out []attr
	for len(b) > 0 {
		if len(b) < 4 {
			return nil, malformed("%d trailing bytes", len(b))
		}
		n := int(binary.NativeEndian.Uint16(b))
		if n < 4 || n > len(b) {
			return nil, malformed("attribute length %d of %d bytes left", n, len(b))
		}
		out = append(out, attr{typ: binary.NativeEndian.Uint16(b[2:]) & nlaTypeMask, val: b[4:n]})
		aligned := (n + 3) &^ 3
		if aligned > len(b) {
			aligned = len(b)
		}
		b = b[aligned:]
	}
	return out, nil
}

func once(dst *[]byte, a attr, what string) error {
	if *dst != nil {
		return malformed("the %s twice", what)
	}
	*dst = a.val
	return nil
}

func u32(b []byte, what string) (uint32, error) {
	if len(b) != 4 {
		return 0, malformed("the %s has %d bytes, want 4", what, len(b))
	}
	return binary.NativeEndian.Uint32(b), nil
}

func u64(b []byte, what string) (uint64, error) {
	if len(b) != 8 {
		return 0, malformed("the %s has %d bytes, want 8", what, len(b))
	}
	return binary.NativeEndian.Uint64(b), nil
}

// str is a NUL-terminated string attribute without another NUL.
func str(b []byte, what string) (string, error) {
	if len(b) == 0 || b[len(b)-1] != 0 {
		return "", malformed("the %s is not NUL-terminated", what)
	}
	s := b[:len(b)-1]
	for _, c := range s {
		if c == 0 {
			return "", malformed("the %s holds a NUL", what)
		}
	}
	return string(s), nil
}
