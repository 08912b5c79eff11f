package bgpproc

import "time"

const (
	// StableRun is how long a process must have run for its end to count as a new failure
	// (restarted at once) rather than the same one again: a router whose UPDATE crashes GoBGP
	// does so seconds after each new session, the connect retry being a second.
	StableRun = 10 * time.Second
	// firstBackoff and maxBackoff bound the wait between starts of a process that keeps failing.
	firstBackoff = time.Second
	maxBackoff   = 30 * time.Second
)

// restartDelay is how long to wait before the next start, after a process that ran for lived
// and the wait before it (prev): none after a process that ran StableRun, so one crash costs
// one start; then one second, doubling up to thirty while it keeps failing (a router that crashes
// GoBGP again on every new session must not keep a node's CPU busy).
func restartDelay(prev, lived time.Duration) time.Duration {
	switch {
	case lived >= StableRun:
		return 0
	case prev == 0:
		return firstBackoff
	}
	return min(2*prev, maxBackoff)
}
