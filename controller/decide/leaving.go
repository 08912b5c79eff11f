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

// leaving is what leavingKey(key) held, and the request the Service's addresses were given for:
// an address it shared is held again under the same sharing key, beside the Services it shares
// it with.
type leaving struct {
	ips []netip.Addr
	req allocator.Request
}

// dropLeaving lets go of what leavingKey(key) holds, and returns it.
func (b *Book) dropLeaving(key string) leaving {
	var l leaving
	if req, ok := b.alloc.Held(leavingKey(key)); ok {
		l.req = req
	}
	if req, ok := b.alloc.Held(key); ok {
		l.req = req
	}
	was, _ := b.alloc.Assignment(leavingKey(key))
	b.alloc.Release(leavingKey(key))
	l.ips = was.IPs
	return l
}

// holdLeaving holds, under leavingKey, what the Service's stored status may list (listed) that it
// no longer holds (holds), as far as nobody else may take it. was is what dropLeaving returned;
// it returns the pools of those of them no longer held, now free. An address the Service shared
// is held under its sharing key: were it not held, it would become free once the last Service
// sharing it let go, while this one's status may still list it.
func (b *Book) holdLeaving(key string, was leaving, listed, holds []netip.Addr) (freedIn []string) {
	hold := allocator.Request{Service: leavingKey(key), SharingKey: was.req.SharingKey, Local: was.req.Local, Selector: was.req.Selector, Stale: true}
	var kept []netip.Addr
	for _, ip := range listed {
		if slices.Contains(holds, ip) || slices.Contains(kept, ip) { // two writes may list it
			continue
		}
		// Held beside whoever holds ip, whatever their key (a Service a rebuild refused still
		// lists it): when they leave, ip stays taken until this status lets go of it.
		if _, err := b.alloc.Restore(hold, append(slices.Clone(kept), ip)); err == nil {
			kept = append(kept, ip)
		}
	}
	var letGo []netip.Addr
	for _, ip := range was.ips {
		if !slices.Contains(kept, ip) && !slices.Contains(holds, ip) {
			letGo = append(letGo, ip)
		}
	}
	return b.poolsContaining(letGo)
}
