// Package bfdprofile holds the settings one BFD session is asked for, with no I/O: the speaker's
// plan fills them from a BGPPeer's bfdProfile and speaker/bfd runs a session with them, so the
// plan does not link the package that opens BFD's sockets.
package bfdprofile

import "time"

// Config is what the local system asks of one session.
type Config struct {
	DesiredMinTx  time.Duration // how often this side would like to send once Up
	RequiredMinRx time.Duration // how often it can take packets from the peer
	DetectMult    uint8
	// Passive: send nothing until the peer has spoken (RFC 5880 §6.1).
	Passive bool
	// Hops is how the packets travel; the state machine never reads it, the sockets do.
	Hops Hops
}

// Hops says how a session's packets travel: single hop (RFC 5881: UDP port 3784, sent with
// TTL 255 and accepted only with TTL 255) or multihop (RFC 5883: port 4784, sent with TTL 255
// and accepted with a TTL of at least MinTTL, for peers that are routers away).
type Hops struct {
	Multihop bool
	MinTTL   uint8 // multihop only: the least TTL accepted
}
