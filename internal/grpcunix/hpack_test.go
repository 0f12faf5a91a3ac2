package grpcunix

import (
	"bytes"
	"math/rand"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/net/http2/hpack"
)

// Every byte, and random strings, Huffman-coded by x/net decode back: the
// code-length table and the canonical construction are RFC 7541's code.
func TestHuffmanDecodeMatchesXNet(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	inputs := []string{"", "pod web in namespace default not found", "application/grpc"}
	for sym := 0; sym < 256; sym++ {
		inputs = append(inputs, string([]byte{byte(sym)}), strings.Repeat(string([]byte{byte(sym)}), 3))
	}
	for i := 0; i < 2000; i++ {
		b := make([]byte, rng.Intn(40))
		rng.Read(b)
		inputs = append(inputs, string(b))
	}
	for _, in := range inputs {
		got, err := huffmanDecode(hpack.AppendHuffmanString(nil, in))
		if err != nil || got != in {
			t.Fatalf("huffmanDecode(encode(%q)) = %q, %v", in, got, err)
		}
	}
}

func TestHuffmanDecodeRefusesMalformed(t *testing.T) {
	for name, b := range map[string][]byte{
		"EOS coded":         {0xff, 0xff, 0xff, 0xff}, // 30 ones = EOS, then padding
		"padding of zeros":  {0x00},                   // '0' (00000) then 000 padding
		"padding of 8 ones": append(hpack.AppendHuffmanString(nil, "a"), 0xff),
		"unfinished code":   {0xfe},
		"invalid long code": {0xff, 0xff, 0xff, 0xfc},
		"one byte all ones": {0xff},
	} {
		if got, err := huffmanDecode(b); err == nil {
			t.Errorf("%s: huffmanDecode(%x) = %q, want an error", name, b, got)
		}
	}
}

// A connection's header blocks from x/net's encoder (dynamic table,
// Huffman, table size updates) decode to what was encoded.
func TestDecodeXNetEncoder(t *testing.T) {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	d := &decoder{maxSize: settingsTableSize}
	rng := rand.New(rand.NewSource(2))
	names := []string{":status", "content-type", "grpc-status", "grpc-message", "x-custom", "date", "x-long"}
	for block := 0; block < 300; block++ {
		if block%50 == 49 {
			enc.SetMaxDynamicTableSize(uint32(rng.Intn(settingsTableSize + 1)))
		}
		var want []field
		for n := rng.Intn(8); n >= 0; n-- {
			f := field{names[rng.Intn(len(names))], strings.Repeat(string(rune('a'+rng.Intn(26))), rng.Intn(20))}
			if f.name == "x-long" {
				f.value = strings.Repeat("v", 3000+rng.Intn(2000))
			}
			want = append(want, f)
			if err := enc.WriteField(hpack.HeaderField{Name: f.name, Value: f.value, Sensitive: rng.Intn(9) == 0}); err != nil {
				t.Fatal(err)
			}
		}
		got, err := d.decode(buf.Bytes())
		if err != nil {
			t.Fatalf("block %d: %v", block, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("block %d: decoded %q, want %q", block, got, want)
		}
		buf.Reset()
	}
}

// What the client encodes, x/net's decoder reads back.
func TestRequestHeadersDecodeWithXNet(t *testing.T) {
	var b []byte
	want := []hpack.HeaderField{{Name: ":path", Value: "/v1.PodResourcesLister/Get"}, {Name: "x", Value: strings.Repeat("y", 300)}}
	for _, f := range want {
		b = appendLiteral(b, f.Name, f.Value)
	}
	got, err := hpack.NewDecoder(settingsTableSize, nil).DecodeFull(b)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("x/net decoded %v, %v; want %v", got, err, want)
	}
}

func TestDecodeRefusesMalformed(t *testing.T) {
	for name, b := range map[string][]byte{
		"index 0":                 {0x80},
		"index past the tables":   {0xbe}, // 62, empty dynamic table
		"truncated integer":       {0xff, 0x80},
		"huge integer":            {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"string past the block":   {0x00, 0x05, 'a'},
		"missing value":           {0x00, 0x01, 'a'},
		"size update too large":   {0x3f, 0xe2, 0x1f}, // 4097
		"size update after field": {0x40, 0x01, 'a', 0x01, 'b', 0x20},
		"bad Huffman name":        {0x00, 0x81, 0x00, 0x00},
		"literal bad name index":  {0x4f, 0x7f, 0x00},
	} {
		d := &decoder{maxSize: settingsTableSize}
		if got, err := d.decode(b); err == nil {
			t.Errorf("%s: decode(%x) = %q, want an error", name, b, got)
		}
	}
}

// The decoder agrees with x/net's on any block: both fail, or both give the
// same fields.
func FuzzDecodeAgreesWithXNet(f *testing.F) {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	_ = enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
	_ = enc.WriteField(hpack.HeaderField{Name: "grpc-message", Value: "pod x in namespace y not found"})
	f.Add(buf.Bytes())
	f.Add([]byte{0x20, 0x82, 0x40, 0x01, 'a', 0x01, 'b', 0xbe})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := (&decoder{maxSize: settingsTableSize}).decode(b)
		want, werr := hpack.NewDecoder(settingsTableSize, nil).DecodeFull(b)
		if (err == nil) != (werr == nil) {
			t.Fatalf("decode(%x): err = %v, x/net err = %v", b, err, werr)
		}
		if err != nil {
			return
		}
		if len(got) != len(want) {
			t.Fatalf("decode(%x) = %q, x/net %v", b, got, want)
		}
		for i := range got {
			if got[i].name != want[i].Name || got[i].value != want[i].Value {
				t.Fatalf("decode(%x) = %q, x/net %v", b, got, want)
			}
		}
	})
}
