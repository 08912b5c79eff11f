package rules

import "time"

// BGPStanding is what a node's fitness lets it do with its BGP routes.
type BGPStanding int

const (
	// BGPAdvertise: the node advertises its routes as its BGPAdvertisements say.
	BGPAdvertise BGPStanding = iota
	// BGPGracefulShutdown: the node is being drained; it still advertises, with the
	// GRACEFUL_SHUTDOWN community (RFC 8326), so that routers move the traffic to the other
	// nodes while its routes still exist.
	BGPGracefulShutdown
	// BGPWithdraw: the node advertises nothing.
	BGPWithdraw
)

// BGPStandingOf applies to BGP the rule the L2 election applies to a node's fitness
// (election.Eligible): a node that is not Ready, whose network is unavailable or that is out
// of service (NodeFitness.Unfit) cannot serve,
// so it withdraws at once; a cordoned node is being drained, so it keeps its routes with
// GRACEFUL_SHUTDOWN during grace after it was cordoned, then withdraws, unless no other node
// can advertise (othersFit false): as over L2, better a node being drained than none.
// cordonedFor is how long the node has been seen cordoned.
func BGPStandingOf(h NodeFitness, cordonedFor, grace time.Duration, othersFit bool) BGPStanding {
	switch {
	case h.Unfit():
		return BGPWithdraw
	case !h.Cordoned:
		return BGPAdvertise
	case cordonedFor < grace || !othersFit:
		return BGPGracefulShutdown
	}
	return BGPWithdraw
}

// Fit reports whether the node may announce without reservation: Ready, its network
// available, in service, not cordoned.
func (h NodeFitness) Fit() bool { return h == NodeFitness{} }
