package bfd

import (
	"bytes"
	"testing"
	"time"
)

// FuzzUnmarshal: no input panics the decoder, and every packet it accepts encodes back to the
// same packet, and to the same 24 bytes as its head when the input carried no extra length.
func FuzzUnmarshal(f *testing.F) {
	f.Add(Packet{State: Up, DetectMult: 3, MyDiscriminator: 1, YourDiscriminator: 2,
		DesiredMinTx: 300 * time.Millisecond, RequiredMinRx: 300 * time.Millisecond}.Marshal())
	f.Add(Packet{State: Down, Poll: true, DetectMult: 1, MyDiscriminator: 7}.Marshal())
	f.Add([]byte{0x20, 0xc4, 3, 24})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Unmarshal(b)
		if err != nil {
			return
		}
		enc := p.Marshal()
		q, err := Unmarshal(enc)
		if err != nil {
			t.Fatalf("re-encoded %v does not decode: %v", p, err)
		}
		if q != p {
			t.Fatalf("decode(encode(%v)) = %v", p, q)
		}
		if b[3] == PacketLen && !bytes.Equal(enc, b[:PacketLen]) {
			t.Fatalf("encode(decode(% x)) = % x", b[:PacketLen], enc)
		}
	})
}
