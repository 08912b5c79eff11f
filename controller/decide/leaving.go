package decide

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/portico-lb/portico/controller/allocator"
)

// leavingKey names, in the allocator, the addresses a Service gave up while its stored status
// still lists them. Status writes go out in parallel lanes, so the write giving such an
// address to another Service could land before the one taking it away: for a moment two
// Services would list it. Held under this key, nobody else can take it until neither the
// cached status nor any write of ours still on its way (or not yet seen by the cache) lists it. The key reads well in the message of a Service that asks
// for the address meanwhile ("in use by ns/a (until its status no longer lists it)").
func leavingKey(key string) string { return key + leavingSuffix }

const leavingSuffix = " (until its status no longer lists it)"

// isLeavingKey reports whether an allocator key is a leavingKey, not a Service.
func isLeavingKey(key string) bool { return strings.HasSuffix(key, leavingSuffix) }

// dropLeaving lets go of what leavingKey(key) holds, and returns it.
func (b *Book) dropLeaving(key string) []netip.Addr {
	was, _ := b.alloc.Assignment(leavingKey(key))
	b.alloc.Release(leavingKey(key))
	return was.IPs
}

// holdLeaving holds, under leavingKey, what the Service's stored status may list (listed) that it
// no longer holds (holds), as far as nobody else holds it. was is what dropLeaving returned;
// it returns the pools of those of them no longer held, now free.
func (b *Book) holdLeaving(key string, was, listed, holds []netip.Addr) (freedIn []string) {
	var kept []netip.Addr
	for _, ip := range listed {
		if slices.Contains(holds, ip) || slices.Contains(kept, ip) { // two writes may list it
			continue
		}
		// Exclusive: fails when another Service holds ip, which then is not free anyway.
		if _, err := b.alloc.Restore(allocator.Request{Service: leavingKey(key)}, append(slices.Clone(kept), ip)); err == nil {
			kept = append(kept, ip)
		}
	}
	var letGo []netip.Addr
	for _, ip := range was {
		if !slices.Contains(kept, ip) && !slices.Contains(holds, ip) {
			letGo = append(letGo, ip)
		}
	}
	return b.poolsContaining(letGo)
}
