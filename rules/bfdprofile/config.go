// Package bfdprofile holds the settings one BFD session is asked for, with no I/O: the speaker's
// plan fills them from a BGPPeer's bfdProfile and speaker/bfd runs a session with them, so the
// plan does not link the package that opens BFD's sockets.
package bfdprofile

import (
	"fmt"
	"time"
)

// Config is what the local system asks of one session.
type Config struct {
	DesiredMinTx  time.Duration // how often this side would like to send once Up
	RequiredMinRx time.Duration // how often it can take packets from the peer
	DetectMult    uint8
	// Passive: send nothing until the peer has spoken (RFC 5880 §6.1).
	Passive bool
	// Hops is how the packets travel; the state machine never reads it, the sockets do.
	Hops Hops
	// Auth is the authentication every packet must carry, both ways; the zero value for none.
	Auth Auth
}

// Auth is a session's authentication (RFC 5880 §6.7.4): Keyed SHA1 or Meticulous Keyed SHA1
// with one key.
type Auth struct {
	Type  AuthType // AuthNone: packets carry no authentication, and one that does is dropped
	KeyID uint8
	Key   Key // at most MaxKeyLen bytes
}

// Key is a BFD authentication key. It prints as "<redacted>" in every format, so a log line or
// an error that includes a Config never shows it.
type Key string

func (Key) String() string   { return "<redacted>" }
func (Key) GoString() string { return "<redacted>" }

// MaxKeyLen is the longest Keyed SHA1 key (RFC 5880 §4.4: it fills the 20-byte digest field).
const MaxKeyLen = 20

// AuthType is an authentication type (RFC 5880 §4.1). Only the two SHA1 types are supported:
// simple passwords travel in clear, and MD5 is broken.
type AuthType uint8

const (
	AuthNone                AuthType = 0
	AuthKeyedSHA1           AuthType = 4
	AuthMeticulousKeyedSHA1 AuthType = 5
)

func (a AuthType) String() string {
	switch a {
	case AuthNone:
		return "none"
	case AuthKeyedSHA1:
		return "keyed-sha1"
	case AuthMeticulousKeyedSHA1:
		return "meticulous-keyed-sha1"
	}
	return fmt.Sprintf("auth-type-%d", uint8(a))
}

// Hops says how a session's packets travel: single hop (RFC 5881: UDP port 3784, sent with
// TTL 255 and accepted only with TTL 255) or multihop (RFC 5883: port 4784, sent with TTL 255
// and accepted with a TTL of at least MinTTL, for peers that are routers away).
type Hops struct {
	Multihop bool
	MinTTL   uint8 // multihop only: the least TTL accepted
}
