package pbwire

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// TestAppendMatchesProtowire checks that the encoder writes what
// protowire writes.
func TestAppendMatchesProtowire(t *testing.T) {
	for _, x := range []uint64{0, 1, 127, 128, 300, 1<<21 - 1, 1 << 35, math.MaxUint64} {
		if got, want := AppendVarint(nil, x), protowire.AppendVarint(nil, x); !bytes.Equal(got, want) {
			t.Errorf("AppendVarint(%d) = %x, want %x", x, got, want)
		}
	}
	for _, tc := range []struct {
		num int
		s   string
	}{{1, "pod"}, {2, string(make([]byte, 300))}, {1 << 20, "x"}, {3, ""}} {
		var want []byte
		if tc.s != "" {
			want = protowire.AppendTag(nil, protowire.Number(tc.num), protowire.BytesType)
			want = protowire.AppendString(want, tc.s)
		}
		if got := AppendString(nil, tc.num, tc.s); !bytes.Equal(got, want) {
			t.Errorf("AppendString(%d, %q) = %x, want %x", tc.num, tc.s, got, want)
		}
	}
}

// TestFieldsReadsProtowire checks that Fields reads every wire type
// protowire writes, in order.
func TestFieldsReadsProtowire(t *testing.T) {
	var msg []byte
	msg = protowire.AppendTag(msg, 1, protowire.BytesType)
	msg = protowire.AppendString(msg, "name")
	msg = protowire.AppendTag(msg, 2, protowire.VarintType)
	msg = protowire.AppendVarint(msg, 1<<40)
	msg = protowire.AppendTag(msg, 3, protowire.Fixed32Type)
	msg = protowire.AppendFixed32(msg, 0xdeadbeef)
	msg = protowire.AppendTag(msg, 4, protowire.Fixed64Type)
	msg = protowire.AppendFixed64(msg, 0x0102030405060708)
	msg = protowire.AppendTag(msg, maxFieldNumber, protowire.BytesType)
	msg = protowire.AppendBytes(msg, nil)
	want := []Field{
		{Num: 1, Type: Bytes, Bytes: []byte("name")},
		{Num: 2, Type: Varint, Varint: 1 << 40},
		{Num: 3, Type: Fixed32, Varint: 0xdeadbeef},
		{Num: 4, Type: Fixed64, Varint: 0x0102030405060708},
		{Num: maxFieldNumber, Type: Bytes, Bytes: []byte{}},
	}
	var got []Field
	if err := Fields(msg, func(f Field) error { got = append(got, f); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("got %d fields, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Num != w.Num || g.Type != w.Type || g.Varint != w.Varint || !bytes.Equal(g.Bytes, w.Bytes) {
			t.Errorf("field %d = %+v, want %+v", i, g, w)
		}
	}
}

func TestFieldsRefusesMalformed(t *testing.T) {
	stop := errors.New("stop")
	tests := map[string][]byte{
		"truncated tag":       {0x80},
		"truncated length":    {0x0a},
		"length past end":     {0x0a, 0x05, 'a'},
		"huge length":         {0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"truncated varint":    {0x10, 0x80},
		"varint overflow":     {0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02},
		"eleven-byte varint":  {0x10, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00},
		"field number zero":   {0x02, 0x00},
		"group":               {0x0b},
		"end group":           {0x0c},
		"wire type 6":         {0x0e},
		"truncated fixed32":   {0x1d, 1, 2, 3},
		"truncated fixed64":   {0x19, 1, 2, 3, 4, 5, 6, 7},
		"field number > 2^29": {0x82, 0x80, 0x80, 0x80, 0x10, 0x00},
	}
	for name, msg := range tests {
		t.Run(name, func(t *testing.T) {
			err := Fields(msg, func(Field) error { return nil })
			if err == nil {
				t.Fatalf("Fields(%x) = nil, want an error", msg)
			}
		})
	}
	if err := Fields([]byte{0x08, 0x01, 0x08, 0x02}, func(Field) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("Fields did not return fn's error: %v", err)
	}
}

func FuzzFields(f *testing.F) {
	f.Add([]byte{0x0a, 0x03, 'a', 'b', 'c', 0x10, 0x01})
	f.Fuzz(func(t *testing.T, msg []byte) {
		var total int
		err := Fields(msg, func(fl Field) error { total += len(fl.Bytes); return nil })
		if err == nil && total > len(msg) {
			t.Fatalf("fields hold %d bytes of a %d-byte message", total, len(msg))
		}
		// protowire must agree on well-formedness for the types both accept.
		n := 0
		for b := msg; len(b) > 0; n++ {
			// protowire parses field numbers up to 2^31; the spec (and
			// proto.Unmarshal) stops at 2^29-1, as Fields does.
			num, typ, l := protowire.ConsumeField(b)
			if l < 0 || num > maxFieldNumber || typ == protowire.StartGroupType || typ == protowire.EndGroupType {
				n = -1
				break
			}
			b = b[l:]
		}
		if (n >= 0) != (err == nil) {
			t.Fatalf("Fields(%x) err = %v, protowire agrees: %v", msg, err, n >= 0)
		}
	})
}
