package allocator

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
)

// holding is an address in use and the Services using it.
type holding struct {
	key   string // sharing key; "" means one Service only
	users map[string]*assignment
}

// usable returns nil when req may keep ip: it is free, already req's, or shareable with every
// Service holding it. Messages name only Services of req's own namespace: a tenant learns that
// an address is taken, never by whom or under which key.
func (a *Allocator) usable(ip netip.Addr, req *Request) *Error {
	h := a.ips[ip]
	if h == nil || req.Stale {
		return nil
	}
	// A stale hold sits beside the Services holding an address whatever their key: it stands
	// in the way of those who would join, not of those who hold it.
	keeping := h.users[req.Service] != nil
	// In name order, so that the message names the same Service every time.
	for _, svc := range slices.Sorted(maps.Keys(h.users)) {
		other := h.users[svc]
		if svc == req.Service || keeping && other.req.Stale {
			continue
		}
		if req.SharingKey == "" || h.key != req.SharingKey {
			same := sameNamespace(svc, req.Service)
			return fail(RequestedIPInUse, "%s is in use by %s%s", ip, whoFor(svc, req), keyHint(h.key, req.SharingKey, same))
		}
		if clash := portClash(other.req.Ports, req.Ports); clash != nil {
			return fail(SharingConflict, "%s is shared with %s, which already uses port %s", ip, whoFor(svc, req), clash)
		}
		if (other.req.Local || req.Local) && !(other.req.Local && req.Local && other.req.Selector == req.Selector) {
			return fail(SharingConflict, "%s is shared with %s; with externalTrafficPolicy Local both Services must be Local and select the same pods", ip, whoFor(svc, req))
		}
	}
	return nil
}

// whoFor names holder in a message to req: by name inside req's namespace only.
func whoFor(holder string, req *Request) string {
	if sameNamespace(holder, req.Service) {
		return holder
	}
	return "a Service in another namespace"
}

// joinable returns nil when req may take ip anew: usable, and shared inside one namespace
// unless every pool holding ip allows sharing across namespaces. Services already sharing
// across namespaces keep their address when a pool stops allowing it (addresses never move
// unless a Service's own request changes), so the namespace rule is checked only here.
func (a *Allocator) joinable(ip netip.Addr, req *Request) *Error {
	if a.heldInOtherNamespace(ip, req) {
		hint := ""
		if req.SharingKey != "" {
			hint = " (a sharing key joins Services of one namespace only, unless the pool sets allowSharingAcrossNamespaces)"
		}
		return fail(RequestedIPInUse, "%s is in use by a Service in another namespace%s", ip, hint)
	}
	return a.usable(ip, req)
}

// heldInOtherNamespace reports whether another namespace's Service holds ip, req does not,
// and ip is outside the pools that allow sharing across namespaces.
func (a *Allocator) heldInOtherNamespace(ip netip.Addr, req *Request) bool {
	h := a.ips[ip]
	if h == nil || h.users[req.Service] != nil {
		return false
	}
	for svc := range h.users {
		if !sameNamespace(svc, req.Service) {
			return !a.sharesAcrossNamespaces(ip)
		}
	}
	return false
}

// sharesAcrossNamespaces: ip is in at least one pool, and every pool holding it allows
// sharing across namespaces (one that does not is enough to keep tenants apart).
func (a *Allocator) sharesAcrossNamespaces(ip netip.Addr) bool {
	in := false
	for _, p := range a.order {
		if p.contains(ip) {
			if !p.SharingAcrossNamespaces {
				return false
			}
			in = true
		}
	}
	return in
}

func sameNamespace(svc, other string) bool {
	ns, _, _ := strings.Cut(svc, "/")
	otherNS, _, _ := strings.Cut(other, "/")
	return ns == otherNS
}

// keyHint says which sharing keys kept two Services apart; another namespace's key is not
// named.
func keyHint(held, wanted string, sameNamespace bool) string {
	switch {
	case held == "" && wanted == "":
		return ""
	case held == "":
		return " (without a sharing key)"
	case !sameNamespace && wanted == "":
		return " (this Service has no sharing key)"
	case !sameNamespace:
		return " (under another sharing key)"
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
		if FamilyOf(ip) != f || !p.contains(ip) || a.joinable(ip, req) != nil {
			continue
		}
		if !best.IsValid() || ip.Less(best) {
			best = ip
		}
	}
	return best, best.IsValid()
}

// keyHeldElsewhere reports whether req's sharing key holds an address in one of pools that
// only the namespace rule kept req from joining: when those pools are full, that is why.
func (a *Allocator) keyHeldElsewhere(req *Request, pools []*poolState) bool {
	for ip := range a.byKey[req.SharingKey] {
		for _, p := range pools {
			if p.contains(ip) && a.heldInOtherNamespace(ip, req) {
				return true
			}
		}
	}
	return false
}
