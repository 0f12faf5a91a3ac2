// Package pbwire reads and writes the protobuf wire format of the few
// messages the plugin exchanges over gRPC: kubelet's pod-resources Get and
// List.
//
// It stands in for google.golang.org/protobuf because the plugin binary
// runs for every pod on the node, on every CNI verb, and pays what it links
// at each start: encoding/protowire pulls in internal/detrand, whose
// package init opens and hashes the executable (docs/performance.md). The
// wire format itself is a few lines; the tests check every message against
// the generated types.
package pbwire

import (
	"errors"
	"fmt"
)

// Type is a field's wire type.
type Type uint8

// Wire types (groups are deprecated and refused).
const (
	Varint  Type = 0
	Fixed64 Type = 1
	Bytes   Type = 2
	Fixed32 Type = 5
)

// maxFieldNumber is protobuf's largest field number (2^29 - 1).
const maxFieldNumber = 1<<29 - 1

// ErrTruncated means the message ends inside a field.
var ErrTruncated = errors.New("truncated protobuf message")

// AppendVarint appends x as a base-128 varint.
func AppendVarint(b []byte, x uint64) []byte {
	for x >= 0x80 {
		b = append(b, byte(x)|0x80)
		x >>= 7
	}
	return append(b, byte(x))
}

// AppendString appends field num as a length-delimited string; an empty
// string is left out, as proto3 encoders do.
func AppendString(b []byte, num int, s string) []byte {
	if s == "" {
		return b
	}
	b = AppendVarint(b, uint64(num)<<3|uint64(Bytes))
	b = AppendVarint(b, uint64(len(s)))
	return append(b, s...)
}

// Field is one field of a message: Bytes holds the value of a
// length-delimited field (a slice of the message), Varint the value of a
// varint or fixed field.
type Field struct {
	Num    int
	Type   Type
	Bytes  []byte
	Varint uint64
}

// Fields calls fn for each field of msg in order, stopping at fn's first
// error. Malformed input (a truncated field, an overlong varint, field number
// 0, a group) is an error; unknown fields are fn's to skip.
func Fields(msg []byte, fn func(Field) error) error {
	for len(msg) > 0 {
		tag, n, err := consumeVarint(msg)
		if err != nil {
			return err
		}
		msg = msg[n:]
		f := Field{Num: int(tag >> 3), Type: Type(tag & 7)}
		if tag>>3 == 0 || tag>>3 > maxFieldNumber {
			return fmt.Errorf("invalid protobuf field number %d", tag>>3)
		}
		if n, err = f.consumeValue(msg); err != nil {
			return fmt.Errorf("field %d: %w", f.Num, err)
		}
		msg = msg[n:]
		if err := fn(f); err != nil {
			return err
		}
	}
	return nil
}

// consumeValue reads f's value from the start of b and returns its length.
func (f *Field) consumeValue(b []byte) (int, error) {
	switch f.Type {
	case Varint:
		x, n, err := consumeVarint(b)
		f.Varint = x
		return n, err
	case Fixed64, Fixed32:
		size := 8
		if f.Type == Fixed32 {
			size = 4
		}
		if len(b) < size {
			return 0, ErrTruncated
		}
		for i := size - 1; i >= 0; i-- {
			f.Varint = f.Varint<<8 | uint64(b[i])
		}
		return size, nil
	case Bytes:
		l, n, err := consumeVarint(b)
		if err != nil {
			return 0, err
		}
		if l > uint64(len(b)-n) {
			return 0, ErrTruncated
		}
		f.Bytes = b[n : n+int(l)]
		return n + int(l), nil
	}
	return 0, fmt.Errorf("unsupported protobuf wire type %d", f.Type)
}

// consumeVarint reads a varint of at most 10 bytes.
func consumeVarint(b []byte) (uint64, int, error) {
	var x uint64
	for i := 0; i < 10; i++ {
		if i >= len(b) {
			return 0, 0, ErrTruncated
		}
		c := b[i]
		if i == 9 && c > 1 {
			return 0, 0, errors.New("protobuf varint overflows 64 bits")
		}
		x |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return x, i + 1, nil
		}
	}
	return 0, 0, errors.New("protobuf varint overflows 64 bits")
}

// String returns a length-delimited field's bytes as a string.
func (f Field) String() string { return string(f.Bytes) }
