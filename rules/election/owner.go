package election

import (
	"crypto/sha256"
	"encoding/binary"
	"net/netip"
)

// Owner returns the node among eligible that answers for ip, and false when eligible is empty.
// The order of eligible does not matter; duplicates are harmless.
func Owner(ip netip.Addr, eligible []string) (string, bool) {
	var (
		best      string
		bestScore uint64
		found     bool
	)
	for _, node := range eligible {
		s := score(node, ip)
		// Ties (astronomically unlikely) go to the smaller name so every node still agrees.
		if !found || s > bestScore || (s == bestScore && node < best) {
			best, bestScore, found = node, s, true
		}
	}
	return best, found
}

// score is node's weight for ip. The separator keeps "a"+"b#ip" and "a#b"+"ip" apart; node
// names cannot contain '#'.
func score(node string, ip netip.Addr) uint64 {
	h := sha256.New()
	h.Write([]byte(node))
	h.Write([]byte{'#'})
	b := ip.Unmap().AsSlice()
	h.Write(b)
	var sum [sha256.Size]byte
	return binary.BigEndian.Uint64(h.Sum(sum[:0]))
}
