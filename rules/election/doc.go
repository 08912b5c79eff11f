// Package election chooses which node answers for an address in layer-2 mode. It is pure: the
// same inputs give the same owner on every node, so speakers agree without talking about it.
//
// A new address is placed by rendezvous (highest-random-weight) hashing (Owner): every eligible
// node gets a score sha256(node "#" ip) and the highest score wins, which spreads addresses
// evenly. Then it stays put (Sticky): while the node holding it (its Speaker status lists it)
// may answer, it keeps it, so a node that rejoins after a restart takes nothing back and a
// planned operation moves each address once, not twice. When a node leaves, only its own
// addresses move, each to the hash's choice among the others. Balance moves addresses back
// towards their hash's choice, one at a time and only once the cluster has settled, when a node
// holds more than Overload × the mean.
package election
