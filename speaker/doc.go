// Package speaker is the announcement side of Portico, one process per node: membership and
// owner choice, the layer-2 (ARP/NDP) responder, BGP through an embedded GoBGP, and the
// self-check probes. It reports what it announces in the node's Speaker object.
package speaker
