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

// Preferred returns the nodes of eligible with the highest weight, in their order: the owner
// is elected among them, and the others answer only when none of them is eligible. A node
// missing from weights weighs 0; with no weights every node is preferred.
func Preferred(eligible []string, weights map[string]int32) []string {
	if len(weights) == 0 {
		return eligible
	}
	var top []string
	var best int32
	for _, n := range eligible {
		switch w := weights[n]; {
		case len(top) == 0 || w > best:
			top, best = append(top[:0], n), w
		case w == best:
			top = append(top, n)
		}
	}
	return top
}

// Weights maps the candidates with a preference to their Weight (nil when none has one).
func Weights(cands []Candidate) map[string]int32 {
	var out map[string]int32
	for _, c := range cands {
		if c.Weight != 0 {
			if out == nil {
				out = map[string]int32{}
			}
			out[c.Name] = c.Weight
		}
	}
	return out
}
