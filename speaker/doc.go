// Package speaker is the announcement side of Portico, one process per node. Speaker is its
// loop (speaker.go, reconcile.go): it gathers the cluster's objects from the cache (watch.go)
// and the live members from the gossip group (gossip.go), has package plan decide what this
// node announces, and drives the sides that carry the plan out: the answerer (L2: ARP/NDP
// through package l2), the advertiser (BGP through package bgp) and the reporter (the node's
// Speaker object, through package status, and the events). The self-check and conflict
// probes run beside it. docs/speaker-l2.md draws the route of a change, file by file.
package speaker
