// Package bgpproc runs the speaker's BGP side (package bgp: GoBGP and BFD) in a child process of
// the speaker, so that a failure there (a panic in GoBGP's message handling, a deadlock, runaway
// memory) ends that process alone: the speaker keeps answering ARP/NDP, restarts the child and
// hands it the whole BGP plan again.
//
// Supervisor is the speaker's side: a speaker.Router that keeps the latest plan, starts the
// child when the plan first names a peer, pings it, watches its memory and restarts it with a
// backoff. Serve is the child's side. They talk over a socket pair (the child's file descriptor
// 3), one gob stream each way: requests (a plan, close, ping, metrics) to the child, answers and
// session changes back, each carrying the child's session states at the time it was written.
package bgpproc
