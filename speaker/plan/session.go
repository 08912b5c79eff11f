package plan

import (
	"net/netip"
	"time"
)

// SessionState is one BGP session's state as the BGP side reports it (package bgp runs the
// session, in the speaker or in its BGP process): here, beside Peer, so that the speaker's loop
// and package bgpproc read it without importing the package that embeds GoBGP.
type SessionState struct {
	Peer    string
	Address netip.Addr
	State   string // Idle, Connect, Active, OpenSent, OpenConfirm, Established
	Since   time.Time
	Routes  int    // routes this node advertises on the session
	PeerASN uint32 // the router's AS as its OPEN gave it (dynamicASN); 0 before that
	Message string // why the session cannot be opened or was refused; empty when nothing is wrong
	// Reason, in a word, why this node keeps the session down (v1alpha1's
	// ReasonPrefixLimitReached); empty otherwise.
	Reason string
}

// Established reports whether the session is up.
func (s SessionState) Established() bool { return s.State == "Established" }
