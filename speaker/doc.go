// Package speaker is the announcement side of Portico, one process per node. Speaker is its
// loop (speaker.go, reconcile.go): the informers (informers.go), the gossip group (gossip.go)
// and the timers fill its inbox (inbox.go); each pass reads the cluster's objects from the
// cache (world.go), has package plan decide what this node announces and what to do about it
// (plan.Planner.Step), and the sides carry the actions out: the forwarding guard, the
// hand-off's takeovers (takeovers.go), the answerer (L2: ARP/NDP through package l2), flow
// sharing (flowshare.go), the advertiser (BGP through the Router) and the reporter (the node's
// Speaker object, through package status, and the events). None of them decides. The probe
// rounds run beside it (probing.go). docs/speaker-l2.md draws the route of a change, file by
// file.
package speaker
