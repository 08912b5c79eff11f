package allocator

import (
	"maps"
	"net/netip"
	"slices"
)

// holding is an address in use and the Services using it.
type holding struct {
	key   string // sharing key; "" means one Service only
	users map[string]*assignment
}

// usable returns nil when req may take ip: it is free, already req's, or shareable with every
// Service holding it.
func (a *Allocator) usable(ip netip.Addr, req *Request) *Error {
	h := a.ips[ip]
	if h == nil {
		return nil
	}
	// In name order, so that the message names the same Service every time.
	for _, svc := range slices.Sorted(maps.Keys(h.users)) {
		other := h.users[svc]
		if svc == req.Service {
			continue
		}
		if req.SharingKey == "" || h.key != req.SharingKey {
			return fail(RequestedIPInUse, "%s is in use by %s%s", ip, svc, keyHint(h.key, req.SharingKey))
		}
		if clash := portClash(other.req.Ports, req.Ports); clash != nil {
			return fail(SharingConflict, "%s is shared with %s, which already uses port %s", ip, svc, clash)
		}
		if (other.req.Local || req.Local) && !(other.req.Local && req.Local && other.req.Selector == req.Selector) {
			return fail(SharingConflict, "%s is shared with %s; with externalTrafficPolicy Local both Services must be Local and select the same pods", ip, svc)
		}
	}
	return nil
}

func keyHint(held, wanted string) string {
	switch {
	case held == "" && wanted == "":
		return ""
	case held == "":
		return " (without a sharing key)"
	case wanted == "":
		return " (sharing key " + held + "; this Service has none)"
	default:
		return " (sharing key " + held + ", not " + wanted + ")"
	}
}

func portClash(a, b []Port) *Port {
	for _, p := range b {
		if slices.Contains(a, p) {
			return &p
		}
	}
	return nil
}

// shared returns the lowest address already used under req's sharing key, of family f and in
// pool p, that req may join.
func (a *Allocator) shared(req *Request, f Family, p *poolState) (netip.Addr, bool) {
	if req.SharingKey == "" {
		return netip.Addr{}, false
	}
	var best netip.Addr
	for ip := range a.byKey[req.SharingKey] {
		if FamilyOf(ip) != f || !p.contains(ip) || a.usable(ip, req) != nil {
			continue
		}
		if !best.IsValid() || ip.Less(best) {
			best = ip
		}
	}
	return best, best.IsValid()
}
