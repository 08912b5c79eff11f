package bfd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"
)

// State is a session state (RFC 5880 §4.1, the Sta field).
type State uint8

const (
	AdminDown State = iota
	Down
	Init
	Up
)

func (s State) String() string {
	return [...]string{"AdminDown", "Down", "Init", "Up"}[s&3]
}

// Diag says why a session last left Up (RFC 5880 §4.1, the Diag field).
type Diag uint8

const (
	DiagNone Diag = iota
	DiagDetectionExpired
	DiagEchoFailed
	DiagNeighborDown
	DiagForwardingReset
	DiagPathDown
	DiagConcatPathDown
	DiagAdminDown
	DiagReverseConcatPathDown
)

func (d Diag) String() string {
	names := [...]string{"none", "detection-time-expired", "echo-failed", "neighbor-signaled-down",
		"forwarding-plane-reset", "path-down", "concatenated-path-down", "admin-down", "reverse-concatenated-path-down"}
	if int(d) < len(names) {
		return names[d]
	}
	return fmt.Sprintf("diag-%d", uint8(d))
}

// PacketLen is the length of a control packet without authentication, the only kind used.
const PacketLen = 24

// Packet is a BFD control packet. Intervals are carried in microseconds on the wire, so they
// round-trip exactly only at microsecond resolution.
type Packet struct {
	Diag                    Diag
	State                   State
	Poll, Final             bool
	ControlPlaneIndependent bool
	Demand                  bool
	DetectMult              uint8
	MyDiscriminator         uint32
	YourDiscriminator       uint32
	DesiredMinTx            time.Duration
	RequiredMinRx           time.Duration
	RequiredMinEchoRx       time.Duration
}

const (
	flagPoll   = 1 << 5
	flagFinal  = 1 << 4
	flagCPI    = 1 << 3
	flagAuth   = 1 << 2
	flagDemand = 1 << 1
	flagMulti  = 1 << 0
)

// Marshal encodes p (version 1, no authentication).
func (p Packet) Marshal() []byte {
	b := make([]byte, PacketLen)
	b[0] = 1<<5 | byte(p.Diag&0x1f)
	b[1] = byte(p.State&3) << 6
	for _, f := range []struct {
		on  bool
		bit byte
	}{{p.Poll, flagPoll}, {p.Final, flagFinal}, {p.ControlPlaneIndependent, flagCPI}, {p.Demand, flagDemand}} {
		if f.on {
			b[1] |= f.bit
		}
	}
	b[2] = p.DetectMult
	b[3] = PacketLen
	binary.BigEndian.PutUint32(b[4:], p.MyDiscriminator)
	binary.BigEndian.PutUint32(b[8:], p.YourDiscriminator)
	binary.BigEndian.PutUint32(b[12:], micros(p.DesiredMinTx))
	binary.BigEndian.PutUint32(b[16:], micros(p.RequiredMinRx))
	binary.BigEndian.PutUint32(b[20:], micros(p.RequiredMinEchoRx))
	return b
}

func micros(d time.Duration) uint32 {
	us := d / time.Microsecond
	if us < 0 {
		return 0
	}
	if us > 1<<32-1 {
		return 1<<32 - 1
	}
	return uint32(us)
}

// ErrMalformed wraps every reason Unmarshal discards a packet.
var ErrMalformed = errors.New("malformed BFD control packet")

// Unmarshal decodes a control packet and applies the reception checks of RFC 5880 §6.8.6 that
// need no session: a packet failing one is discarded, with an error saying which.
func Unmarshal(b []byte) (Packet, error) {
	bad := func(format string, args ...any) (Packet, error) {
		return Packet{}, fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
	if len(b) < PacketLen {
		return bad("%d bytes, want at least %d", len(b), PacketLen)
	}
	if v := b[0] >> 5; v != 1 {
		return bad("version %d, want 1", v)
	}
	if b[1]&flagAuth != 0 {
		return bad("authentication present, none configured")
	}
	if n := int(b[3]); n < PacketLen || n > len(b) {
		return bad("length field %d with %d bytes received", n, len(b))
	}
	if b[2] == 0 {
		return bad("detect multiplier 0")
	}
	if b[1]&flagMulti != 0 {
		return bad("multipoint bit set")
	}
	p := Packet{
		Diag: Diag(b[0] & 0x1f), State: State(b[1] >> 6),
		Poll: b[1]&flagPoll != 0, Final: b[1]&flagFinal != 0,
		ControlPlaneIndependent: b[1]&flagCPI != 0, Demand: b[1]&flagDemand != 0,
		DetectMult:        b[2],
		MyDiscriminator:   binary.BigEndian.Uint32(b[4:]),
		YourDiscriminator: binary.BigEndian.Uint32(b[8:]),
		DesiredMinTx:      time.Duration(binary.BigEndian.Uint32(b[12:])) * time.Microsecond,
		RequiredMinRx:     time.Duration(binary.BigEndian.Uint32(b[16:])) * time.Microsecond,
		RequiredMinEchoRx: time.Duration(binary.BigEndian.Uint32(b[20:])) * time.Microsecond,
	}
	if p.Poll && p.Final {
		return bad("poll and final both set")
	}
	if p.MyDiscriminator == 0 {
		return bad("my discriminator 0")
	}
	if p.YourDiscriminator == 0 && p.State != Down && p.State != AdminDown {
		return bad("your discriminator 0 in state %v", p.State)
	}
	return p, nil
}

// String renders p for logs and transcripts.
func (p Packet) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v", p.State)
	if p.Diag != DiagNone {
		fmt.Fprintf(&b, " diag=%v", p.Diag)
	}
	if p.Poll {
		b.WriteString(" P")
	}
	if p.Final {
		b.WriteString(" F")
	}
	fmt.Fprintf(&b, " my=%d your=%d tx=%v rx=%v mult=%d", p.MyDiscriminator, p.YourDiscriminator, p.DesiredMinTx, p.RequiredMinRx, p.DetectMult)
	return b.String()
}
