// Package bfd detects a dead forwarding path to a BGP peer in well under a second with
// Bidirectional Forwarding Detection: RFC 5880 asynchronous mode over RFC 5881 single-hop UDP.
//
// It is written here because no served library does BFD: GoBGP has none, and no Go BFD module
// is available from the module proxy this project builds with.
//
// The protocol core (Session, Packet) is I/O-free: its inputs are received control packets and
// the current time, its outputs the packets to send, the next deadline and state changes, so its
// behaviour is pinned by the transcripts in testdata/. Jitter is an input too. Conn and Manager
// (socket.go, manager.go) do the I/O: one UDP socket receiving on port 3784 with TTL 255
// required, and one sending socket per peer from a port in 49152–65535.
package bfd
