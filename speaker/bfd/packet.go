package bfd

import (
	"crypto/sha1"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/portico-lb/portico/rules/bfdprofile"
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

// PacketLen is the length of a control packet without authentication.
const PacketLen = 24

// sha1AuthLen is the length of a Keyed SHA1 authentication section (RFC 5880 §4.4), and
// sha1PacketLen that of a packet carrying one.
const (
	sha1AuthLen   = 28
	sha1PacketLen = PacketLen + sha1AuthLen
)

// AuthSection is a packet's Keyed SHA1 authentication section (RFC 5880 §4.4); Type AuthNone
// when the packet has none.
type AuthSection struct {
	Type     AuthType
	KeyID    uint8
	Sequence uint32
	Digest   [sha1.Size]byte
	reserved byte // ignored on receipt, but part of what the digest covers
}

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
	Auth                    AuthSection
}

const (
	flagPoll   = 1 << 5
	flagFinal  = 1 << 4
	flagCPI    = 1 << 3
	flagAuth   = 1 << 2
	flagDemand = 1 << 1
	flagMulti  = 1 << 0
)

// Marshal encodes p (version 1), with its authentication section if it has one.
func (p Packet) Marshal() []byte {
	n := PacketLen
	if p.Auth.Type != AuthNone {
		n = sha1PacketLen
	}
	b := make([]byte, n)
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
	b[3] = byte(n)
	binary.BigEndian.PutUint32(b[4:], p.MyDiscriminator)
	binary.BigEndian.PutUint32(b[8:], p.YourDiscriminator)
	binary.BigEndian.PutUint32(b[12:], micros(p.DesiredMinTx))
	binary.BigEndian.PutUint32(b[16:], micros(p.RequiredMinRx))
	binary.BigEndian.PutUint32(b[20:], micros(p.RequiredMinEchoRx))
	if a := p.Auth; a.Type != AuthNone {
		b[1] |= flagAuth
		b[24], b[25], b[26], b[27] = byte(a.Type), sha1AuthLen, a.KeyID, a.reserved
		binary.BigEndian.PutUint32(b[28:], a.Sequence)
		copy(b[32:], a.Digest[:])
	}
	return b
}

// MaxKeyLen is the longest Keyed SHA1 key (RFC 5880 §4.4: it fills the 20-byte digest field).
const MaxKeyLen = bfdprofile.MaxKeyLen

// The key fills the digest field.
var _ [MaxKeyLen]struct{} = [sha1.Size]struct{}{}

// Signed is p with its digest computed under key: the SHA1 of the packet with the key, padded
// with zeros to 20 bytes, in place of the digest (RFC 5880 §6.7.4).
func (p Packet) Signed(key Key) Packet {
	p.Auth.Digest = p.digest(key)
	return p
}

// DigestValid reports whether p's digest is the one key gives it, in constant time.
func (p Packet) DigestValid(key Key) bool {
	d := p.digest(key)
	return subtle.ConstantTimeCompare(d[:], p.Auth.Digest[:]) == 1
}

func (p Packet) digest(key Key) [sha1.Size]byte {
	p.Auth.Digest = [sha1.Size]byte{}
	copy(p.Auth.Digest[:], key)
	return sha1.Sum(p.Marshal())
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
	n := int(b[3])
	if n > len(b) {
		return bad("length field %d with %d bytes received", n, len(b))
	}
	var auth AuthSection
	if b[1]&flagAuth != 0 {
		var err error
		if auth, err = unmarshalAuth(b, n); err != nil {
			return Packet{}, err
		}
	} else if n < PacketLen {
		return bad("length field %d, want at least %d", n, PacketLen)
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
		Auth:              auth,
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

// unmarshalAuth reads the authentication section of packet b, n bytes long by its length field.
func unmarshalAuth(b []byte, n int) (AuthSection, error) {
	var auth AuthSection
	bad := func(format string, args ...any) (AuthSection, error) {
		return AuthSection{}, fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
	if n < PacketLen+2 {
		return bad("length field %d with authentication, want at least %d", n, PacketLen+2)
	}
	auth.Type = AuthType(b[24])
	if auth.Type != AuthKeyedSHA1 && auth.Type != AuthMeticulousKeyedSHA1 {
		return bad("authentication type %v not supported", auth.Type)
	}
	if b[25] != sha1AuthLen || n != sha1PacketLen {
		return bad("%v section of %d bytes in a packet of %d, want %d in %d", auth.Type, b[25], n, sha1AuthLen, sha1PacketLen)
	}
	auth.KeyID, auth.reserved = b[26], b[27]
	auth.Sequence = binary.BigEndian.Uint32(b[28:])
	copy(auth.Digest[:], b[32:sha1PacketLen])
	return auth, nil
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
	if a := p.Auth; a.Type != AuthNone {
		fmt.Fprintf(&b, " auth=%v key=%d seq=%d", a.Type, a.KeyID, a.Sequence)
	}
	return b.String()
}
