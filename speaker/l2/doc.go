// Package l2 answers ARP requests (IPv4) and neighbour solicitations (IPv6) for the addresses
// this node owns, on chosen interfaces, and announces takeovers with gratuitous ARP and
// unsolicited neighbour advertisements. It never adds an address to an interface: the kernel
// knows nothing of the addresses, so it never answers for them itself, and losing an address
// is just forgetting it.
//
// The decisions about one packet (arpReply, naFor) are pure functions of its bytes, fuzzed;
// the Responder around them only moves bytes between sockets and those functions.
package l2
