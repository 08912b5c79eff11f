package bgp

import (
	"fmt"
	"maps"
	"time"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// prefixLimitRetry is how long a session ceased for its prefix limit stays down before it is
// opened again: a router whose configuration was fixed gets its session back within it, and one
// that goes on sending too much costs the node one burst of at most maxPrefixes routes (per
// family) a minute.
const prefixLimitRetry = time.Minute

// ceasedForLimit records (s.mu held) that GoBGP ceased ss, the router having sent more routes
// than the peer's MaxPrefixes in one family (RFC 4486 Cease, subcode 1), counts it and opens
// the session again after prefixLimitRetry. GoBGP itself would keep it down for good.
func (s *Sessions) ceasedForLimit(ss *session) {
	again := time.Now().Add(prefixLimitRetry)
	ss.state.Reason = v1alpha1.ReasonPrefixLimitReached
	ss.state.Message = fmt.Sprintf("ceased by this node: the router sent more than %d routes in one address family "+
		"(the BGPPeer's maxPrefixes; RFC 4486 Cease, Maximum Number of Prefixes Reached); opened again at %s",
		ss.peer.MaxPrefixes, again.UTC().Format(time.TimeOnly))
	s.Log.Info("BGP session ceased: the router sent more routes than the limit", "peer", ss.peer.Name,
		"maxPrefixes", ss.peer.MaxPrefixes, "retry", prefixLimitRetry)
	if s.ceases == nil {
		s.ceases = map[string]uint64{}
	}
	s.ceases[ss.peer.Name]++
	if ss.retry != nil {
		ss.retry.Stop()
	}
	ss.retry = time.AfterFunc(prefixLimitRetry, func() { s.redial(ss) })
}

// limitCeases counts, by peer name, the sessions ceased for their prefix limit.
func (s *Sessions) limitCeases() map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.ceases)
}
