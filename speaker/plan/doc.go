// Package plan decides what one node announces: which Service addresses it answers for over L2
// (ARP/NDP), which sessions it holds and which routes it advertises over BGP (with BFD), and
// what it finds wrong with the configuration. It is pure: its input is the cluster's objects
// (World) and the members the node sees alive, its output a Plan; it opens no socket, reads no
// clock and calls no apiserver, so every decision is pinned by the transcripts in testdata/.
//
// Make plans every Service; a Planner keeps the plan between changes and plans again only the
// Services that changed (Planner.Update), reporting what changed (Changes) so that applying and
// reporting it costs the change. The speaker package gathers the World, hands the plan's L2
// half to its announcer and its BGP half (BGP) to package bgp, and reports both.
package plan
