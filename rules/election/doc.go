// Package election chooses which node answers for an address in layer-2 mode. It is pure: the
// same inputs give the same owner on every node, so speakers agree without talking about it.
//
// The owner is picked by rendezvous (highest-random-weight) hashing: every eligible node gets a
// score sha256(node "#" ip) and the highest score wins. That spreads addresses evenly, and when a
// node joins it takes exactly the addresses where it now scores highest (about 1/n of them); no
// other address changes owner. When a node leaves, only its own addresses move.
package election
