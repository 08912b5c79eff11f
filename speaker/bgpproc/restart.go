package bgpproc

import "time"

const (
	// stableRun is how long a process must have run for its end to count as a first failure.
	stableRun = time.Minute
	// firstBackoff and maxBackoff bound the wait between starts of a process that keeps failing.
	firstBackoff = time.Second
	maxBackoff   = 30 * time.Second
)

// restartDelay is how long to wait before the next start, after a process that ran for lived
// and the wait before it (prev): none after a process that ran stably, so one crash costs one
// start; then one second, doubling up to thirty while it keeps failing (a router that crashes
// GoBGP again on every new session must not keep a node's CPU busy).
func restartDelay(prev, lived time.Duration) time.Duration {
	switch {
	case lived >= stableRun:
		return 0
	case prev == 0:
		return firstBackoff
	}
	return min(2*prev, maxBackoff)
}
