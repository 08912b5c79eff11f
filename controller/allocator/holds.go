package allocator

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Hold is an address a pool keeps for a deleted Service (the pool's HoldFor), so that the
// Service created again under its name gets it back. Nobody else gets it automatically, and
// an explicit request for it fails, except from a Service of the same namespace: asking for an
// address by name wins over a hold. A hold ends at Until (Expire), when the Service gets
// addresses again, or when its pool stops holding or containing the address.
type Hold struct {
	IP netip.Addr
	// Service is "namespace/name" of the Service the address is kept for.
	Service string
	// SharingKey the Service shared the address under: a Service of its namespace with the
	// same key may take it back too (the chart's other Service, created first).
	SharingKey string
	Pool       string
	Until      time.Time
}

// holds are the allocator's holds, indexed by who may claim them.
type holds struct {
	byIP     map[netip.Addr]Hold
	claimers map[string]map[netip.Addr]struct{} // claimKey → held addresses
	next     time.Time                          // the soonest Until, or zero: nothing to expire
}

func (h *holds) init() {
	h.byIP = map[netip.Addr]Hold{}
	h.claimers = map[string]map[netip.Addr]struct{}{}
}

// claimKeys are the index keys a hold may be claimed under: its Service's, and its namespace
// and sharing key's.
func claimKeys(service, sharingKey string) []string {
	keys := []string{"svc " + service}
	if sharingKey != "" {
		ns, _, _ := strings.Cut(service, "/")
		keys = append(keys, "key "+ns+"/"+sharingKey)
	}
	return keys
}

func (h *holds) add(x Hold) {
	h.byIP[x.IP] = x
	for _, k := range claimKeys(x.Service, x.SharingKey) {
		if h.claimers[k] == nil {
			h.claimers[k] = map[netip.Addr]struct{}{}
		}
		h.claimers[k][x.IP] = struct{}{}
	}
	if h.next.IsZero() || x.Until.Before(h.next) {
		h.next = x.Until
	}
}

func (h *holds) remove(ip netip.Addr) {
	x, ok := h.byIP[ip]
	if !ok {
		return
	}
	delete(h.byIP, ip)
	for _, k := range claimKeys(x.Service, x.SharingKey) {
		delete(h.claimers[k], ip)
		if len(h.claimers[k]) == 0 {
			delete(h.claimers, k)
		}
	}
}

// HoldReleased frees what a deleted Service held, as Release does, and holds each address it
// freed for the Service until now plus the HoldFor of the pool it was given from, if that pool
// has one and holds fewer than maxHolds addresses. It returns the addresses freed (held or
// not) and the holds made.
func (a *Allocator) HoldReleased(service string, now time.Time, maxHolds int) (freed []netip.Addr, held []Hold) {
	asg, ok := a.services[service]
	if !ok {
		return nil, nil
	}
	freed = a.Release(service)
	for _, ip := range freed {
		p := a.pools[asg.pools[slices.Index(asg.ips, ip)]]
		if p == nil || p.HoldFor <= 0 || p.holds >= maxHolds {
			continue
		}
		x := Hold{IP: ip, Service: service, SharingKey: asg.req.SharingKey, Pool: p.Name, Until: now.Add(p.HoldFor)}
		a.startHold(x)
		held = append(held, x)
	}
	return freed, held
}

// RestoreHold records a hold read back from a pool's status after a restart. It fails when the
// hold no longer stands: its pool is gone, does not hold released addresses, or no longer
// contains the address, or a Service holds the address (its status wins), or the Service it
// is kept for holds addresses again.
func (a *Allocator) RestoreHold(x Hold) bool {
	p := a.pools[x.Pool]
	if p == nil || p.HoldFor <= 0 || !p.contains(x.IP) || a.ips[x.IP] != nil || a.services[x.Service] != nil {
		return false
	}
	if _, dup := a.holds.byIP[x.IP]; dup {
		return false
	}
	a.startHold(x)
	return true
}

// startHold takes x.IP out of the free addresses for x.
func (a *Allocator) startHold(x Hold) {
	a.holds.add(x)
	a.taken.add(x.IP)
	a.takenBug.add(x.IP)
	for _, p := range a.order {
		p.countHeld(x.IP, 1)
	}
	if p := a.pools[x.Pool]; p != nil {
		p.holds++
	}
}

// endHold ends the hold on ip, if any: the address is free again, or about to be taken.
func (a *Allocator) endHold(ip netip.Addr) {
	x, ok := a.holds.byIP[ip]
	if !ok {
		return
	}
	for _, p := range a.order {
		p.countHeld(ip, -1)
	}
	if p := a.pools[x.Pool]; p != nil {
		p.holds--
	}
	a.forgetHold(ip)
}

// forgetHold ends the hold on ip, counts aside.
func (a *Allocator) forgetHold(ip netip.Addr) {
	a.holds.remove(ip)
	if a.ips[ip] == nil { // else a Service is taking it: it stays in the taken runs
		a.taken.remove(ip)
		a.takenBug.remove(ip)
	}
}

// Expire ends the holds whose time is up at now, and returns them.
func (a *Allocator) Expire(now time.Time) []Hold {
	if a.holds.next.IsZero() || now.Before(a.holds.next) {
		return nil
	}
	var gone []Hold
	a.holds.next = time.Time{}
	for _, x := range a.holds.byIP {
		if !now.Before(x.Until) {
			gone = append(gone, x)
		} else if a.holds.next.IsZero() || x.Until.Before(a.holds.next) {
			a.holds.next = x.Until
		}
	}
	for _, x := range gone {
		a.endHold(x.IP)
	}
	sortHolds(gone)
	return gone
}

// NextExpiry is when the soonest hold ends; zero when there is none.
func (a *Allocator) NextExpiry() time.Time { return a.holds.next }

// Holds lists the named pool's holds, soonest to end first.
func (a *Allocator) Holds(pool string) []Hold {
	var out []Hold
	for _, x := range a.holds.byIP {
		if x.Pool == pool {
			out = append(out, x)
		}
	}
	sortHolds(out)
	return out
}

func sortHolds(hs []Hold) {
	slices.SortFunc(hs, func(x, y Hold) int { return cmp.Or(x.Until.Compare(y.Until), x.IP.Compare(y.IP)) })
}

// claimable returns the lowest address of family f held in pool p for req: for its Service, or
// for its namespace and sharing key.
func (a *Allocator) claimable(req *Request, f Family, p *poolState) (netip.Addr, bool) {
	var best netip.Addr
	for _, k := range claimKeys(req.Service, req.SharingKey) {
		for ip := range a.holds.claimers[k] {
			if FamilyOf(ip) == f && a.holds.byIP[ip].Pool == p.Name && (!best.IsValid() || ip.Less(best)) {
				best = ip
			}
		}
	}
	return best, best.IsValid()
}

// claimedPool names the pool holding an address for req (the first by name, when several
// do), or "".
func (a *Allocator) claimedPool(req *Request) string {
	var pools []string
	for _, k := range claimKeys(req.Service, req.SharingKey) {
		for ip := range a.holds.claimers[k] {
			pools = append(pools, a.holds.byIP[ip].Pool)
		}
	}
	if len(pools) == 0 {
		return ""
	}
	slices.Sort(pools)
	return pools[0]
}

// heldAgainst says why req may not take ip by explicit request: it is held for a Service of
// another namespace. Messages never name another namespace's Service.
func (a *Allocator) heldAgainst(ip netip.Addr, req *Request) *Error {
	x, ok := a.holds.byIP[ip]
	if !ok || sameNamespace(x.Service, req.Service) {
		return nil
	}
	return fail(RequestedIPInUse, "%s is held for a deleted Service in another namespace until %s (the pool's addressHold)", ip, x.Until.UTC().Format(time.RFC3339))
}

// dropHoldsFor ends the holds of a Service that holds addresses again: it got one back, or
// asked for others.
func (a *Allocator) dropHoldsFor(service string) {
	for ip := range maps.Clone(a.holds.claimers["svc "+service]) {
		a.endHold(ip)
	}
}
