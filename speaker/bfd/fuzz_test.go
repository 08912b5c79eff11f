package bfd

import (
	"bytes"
	"testing"
	"time"
)

// FuzzUnmarshal: no input panics the decoder, and every packet it accepts encodes back to the
// same packet, and to the same bytes as the input's first Length bytes when the packet's
// encoding has that length (it has no padding beyond the 24 or 52 bytes the encoder writes).
func FuzzUnmarshal(f *testing.F) {
	f.Add(Packet{State: Up, DetectMult: 3, MyDiscriminator: 1, YourDiscriminator: 2,
		DesiredMinTx: 300 * time.Millisecond, RequiredMinRx: 300 * time.Millisecond}.Marshal())
	f.Add(Packet{State: Down, Poll: true, DetectMult: 1, MyDiscriminator: 7}.Marshal())
	f.Add([]byte{0x20, 0xc4, 3, 24})
	f.Add(Packet{State: Up, DetectMult: 3, MyDiscriminator: 1, YourDiscriminator: 2,
		Auth: AuthSection{Type: AuthMeticulousKeyedSHA1, KeyID: 1, Sequence: 9}}.Signed("key").Marshal())
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
		if n := int(b[3]); n == len(enc) && !bytes.Equal(enc, b[:n]) {
			t.Fatalf("encode(decode(% x)) = % x", b[:n], enc)
		}
	})
}
