// Package bgp advertises this node's LoadBalancer addresses to BGP routers through GoBGP
// (github.com/osrg/gobgp/v4) embedded as a library.
//
// The speaker's plan says what this node should do over BGP (plan.BGP: the sessions it should
// hold and the routes each session should carry); Sessions.Apply diffs it against what is
// running and touches only what changed. Each BGPPeer gets its own GoBGP server with exactly one
// neighbour: routes differ per peer (advertisements name peers, local-pref goes to iBGP peers
// only), a per-server RIB carries exactly that peer's routes without an export-policy engine,
// and reconfiguring one peer (even its ASN or router ID) can never reset another's session.
package bgp
