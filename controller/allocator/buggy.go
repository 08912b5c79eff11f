package allocator

import (
	"encoding/binary"
	"net/netip"

	"github.com/portico-lb/portico/rules"
)

// isBuggy reports whether a is an IPv4 address ending in .0 or .255: valid host addresses
// inside a larger range, but some old clients and routers treat them as network or broadcast
// addresses. avoidBuggyIPs keeps them from being handed out automatically.
func isBuggy(a netip.Addr) bool {
	if !a.Is4() {
		return false
	}
	last := a.As4()[3]
	return last == 0 || last == 255
}

// buggyIn counts the buggy addresses of an IPv4 range.
func buggyIn(r rules.Range) int64 {
	if !r.Is4() {
		return 0
	}
	f, l := v4(r.First), v4(r.Last)
	// addresses x in [f, l] with x mod 256 == k, for k = 0 and 255
	count := func(k int64) int64 { return floorDiv(l-k, 256) - floorDiv(f-1-k, 256) }
	return count(0) + count(255)
}

func v4(a netip.Addr) int64 {
	b := a.As4()
	return int64(binary.BigEndian.Uint32(b[:]))
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
