// Package bfd detects a dead forwarding path to a BGP peer in well under a second with
// Bidirectional Forwarding Detection: RFC 5880 asynchronous mode over RFC 5881 single-hop or
// RFC 5883 multihop UDP, with optional Keyed SHA1 or Meticulous Keyed SHA1 authentication.
//
// It is written here rather than taken from GoBGP. GoBGP v4.8.0 has a BFD of its own
// (pkg/server/bfd_server.go, bfd_peer.go; "partial implementation ... only for fast detection"):
// single hop only, no TTL check on what it receives, the version, A and M bits not checked, no
// authentication, no jitter, no slow rate before Up, no poll sequence beyond answering one, no
// passive mode, and a Down the router signals resets the BGP session (which the speaker avoids:
// bird re-creates its BFD session for every new BGP session). Portico's BGPPeers need multihop
// (ebgpMultiHop), GTSM, authentication and passive mode. docs/speaker-bgp.md has the comparison.
//
// The protocol core (Session, Packet) is I/O-free: its inputs are received control packets and
// the current time, its outputs the packets to send, the next deadline and state changes, so its
// behaviour is pinned by the transcripts in testdata/, the reception rules of RFC 5880 §6.8.6
// and the authentication of §6.7.4 included. Jitter and the random starting values are inputs
// too. The listener and Manager (socket.go, manager.go) do the I/O: one UDP socket per address family
// and port receiving with the TTL checked, one sending socket per peer from a port in
// 49152–65535, and random local discriminators.
package bfd
