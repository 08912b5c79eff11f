package decide

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/allocator"
	"github.com/portico-lb/portico/rules"
)

// proxyAnswererAddrs: a MAC that answers the probes of more than this many addresses of one
// pool is taken for a proxy answerer (a router with proxy ARP or NDP, a Wi-Fi extender
// answering for its clients, a host forging answers), not for a host holding them, and its
// answers hold nothing back. A host on the LAN holds one address, a few with aliases; a DHCP
// range overlapping the pool gives each host one. A pool lists at most 4 next addresses per
// family, so a MAC answering for 4 of them answers for every address of a family the speakers
// ask about: it would otherwise empty any pool, 4 addresses every round.
const proxyAnswererAddrs = 3

// FindingTTL bounds how long a speaker's foreign answers count without being confirmed: while
// its Speaker says Ready and its latest probe round (status.probedAt, written every round while
// it lists anything) is at most this old. With rounds every 30 s that is 6 rounds missed; a
// speaker that stopped, lost the apiserver or was cut off the LAN holds nothing back longer.
// A probedAt further ahead than this (a node's clock far off) does not count either.
const FindingTTL = 3 * time.Minute

// ProbeVerdict is what the speakers' conflict probes hold back: one finding per address (what
// the allocator skips), the proxy answerers of each pool (whose answers hold nothing back), and
// when the next live answer expires (zero: none does).
type ProbeVerdict struct {
	InUse   []Finding
	Proxies map[string][]porticov1.ProxyAnswerer
	Expires time.Time
}

// Finding is one speaker's report of a foreign host answering for a pool address.
type Finding struct {
	Addr netip.Addr
	porticov1.AddressInUse
}

// Answerers are the addresses the verdict holds back, each with the MAC that answers for it.
func (v ProbeVerdict) Answerers() map[netip.Addr]string {
	out := make(map[netip.Addr]string, len(v.InUse))
	for _, f := range v.InUse {
		out[f.Addr] = f.MAC
	}
	return out
}

func earlier(a, b Finding) bool {
	return cmp.Or(a.Since.Compare(b.Since.Time), cmp.Compare(a.MAC, b.MAC), cmp.Compare(a.SeenBy, b.SeenBy)) < 0
}

// heard is one live answer: a speaker heard mac answer for addr.
type heard struct {
	addr   netip.Addr
	mac    string
	seenBy string
	since  metav1.Time
}

// JudgeProbes folds every speaker's status.foreignAnswers into what holds addresses back, at
// now. Answers count only from speakers that are Ready and probed within FindingTTL (liveSpeaker),
// never from a MAC any speaker answers with (that is a speaker, not a foreign host), nor for an
// address of a pool whose conflictProbing is Disabled. Per pool, a MAC answering for more than
// proxyAnswererAddrs of its addresses is a proxy answerer, and stays one while it answers for
// any of them (so a nearly full pool's last few addresses are not held back by it); its
// answers for the pool's addresses hold nothing back. The Speakers are written by each node
// and the answers come from anyone on the LAN: nothing here is trusted blindly.
func JudgeProbes(speakers []porticov1.Speaker, pools []porticov1.IPAddressPool, now time.Time) ProbeVerdict {
	v := ProbeVerdict{Proxies: map[string][]porticov1.ProxyAnswerer{}}
	answers := liveAnswers(speakers, now, &v.Expires)
	if len(answers) == 0 { // nothing heard: no pool's address is held back, nobody is a proxy
		return v
	}
	ranges := make([][]rules.Range, len(pools))
	for i := range pools {
		ranges[i], _ = rules.PoolRanges(&pools[i])
	}
	inPool := func(i int, a netip.Addr) bool {
		return slices.ContainsFunc(ranges[i], func(r rules.Range) bool { return r.Contains(a) })
	}
	// proxyIn[pool index] is the set of MACs that are proxy answerers there.
	proxyIn := make([]map[string]bool, len(pools))
	for i := range pools {
		proxyIn[i] = map[string]bool{}
		if !pools[i].ProbesConflicts() {
			continue
		}
		v.Proxies[pools[i].Name] = proxyAnswerers(&pools[i], answers, func(a netip.Addr) bool { return inPool(i, a) })
		for _, p := range v.Proxies[pools[i].Name] {
			proxyIn[i][p.MAC] = true
		}
	}
	best := map[netip.Addr]Finding{}
	for _, h := range answers {
		ignored := false
		for i := range pools {
			if inPool(i, h.addr) && (!pools[i].ProbesConflicts() || proxyIn[i][h.mac]) {
				ignored = true
			}
		}
		if ignored {
			continue
		}
		f := Finding{Addr: h.addr, AddressInUse: porticov1.AddressInUse{Address: h.addr.String(), MAC: h.mac, SeenBy: h.seenBy, Since: h.since}}
		if old, ok := best[h.addr]; !ok || earlier(f, old) {
			best[h.addr] = f
		}
	}
	for _, f := range best {
		v.InUse = append(v.InUse, f)
	}
	slices.SortFunc(v.InUse, func(a, b Finding) int { return a.Addr.Compare(b.Addr) })
	return v
}

// proxyAnswerers are the pool's proxy answerers among answers (inPool: those for its
// addresses): the MACs answering for more than proxyAnswererAddrs of them, or already listed
// in its status, by MAC, at most MaxPoolProxyAnswerers.
func proxyAnswerers(pool *porticov1.IPAddressPool, answers []heard, inPool func(netip.Addr) bool) []porticov1.ProxyAnswerer {
	listed := map[string]bool{}
	for _, p := range pool.Status.ProxyAnswerers {
		listed[strings.ToLower(p.MAC)] = true
	}
	addrs, first := map[string]map[netip.Addr]bool{}, map[string]heard{}
	for _, h := range answers {
		if !inPool(h.addr) {
			continue
		}
		if addrs[h.mac] == nil {
			addrs[h.mac] = map[netip.Addr]bool{}
		}
		addrs[h.mac][h.addr] = true
		if f, ok := first[h.mac]; !ok || earlierHeard(h, f) {
			first[h.mac] = h
		}
	}
	var out []porticov1.ProxyAnswerer
	for mac, set := range addrs {
		if len(set) > proxyAnswererAddrs || listed[mac] {
			f := first[mac]
			out = append(out, porticov1.ProxyAnswerer{MAC: mac, Addresses: int32(len(set)), SeenBy: f.seenBy, Since: f.since})
		}
	}
	slices.SortFunc(out, func(a, b porticov1.ProxyAnswerer) int { return cmp.Compare(a.MAC, b.MAC) })
	return out[:min(len(out), porticov1.MaxPoolProxyAnswerers)]
}

// liveAnswers lists the answers of the speakers whose findings count at now (liveSpeaker),
// MACs in lower case, those of any speaker's own MACs and unparsable addresses dropped, and
// moves expires to the earliest time one of them stops counting.
func liveAnswers(speakers []porticov1.Speaker, now time.Time, expires *time.Time) []heard {
	ours := map[string]bool{}
	for i := range speakers {
		for _, mac := range speakers[i].Status.HardwareAddrs {
			ours[strings.ToLower(mac)] = true
		}
	}
	var out []heard
	for i := range speakers {
		s := &speakers[i]
		if len(s.Status.ForeignAnswers) == 0 || !liveSpeaker(s, now) {
			continue
		}
		if end := s.Status.ProbedAt.Add(FindingTTL); expires.IsZero() || end.Before(*expires) {
			*expires = end
		}
		for _, a := range s.Status.ForeignAnswers {
			ip, err := netip.ParseAddr(a.IP)
			mac := strings.ToLower(a.MAC)
			if err != nil || ours[mac] {
				continue
			}
			out = append(out, heard{addr: ip, mac: mac, seenBy: s.Name, since: a.Since})
		}
	}
	return out
}

// liveSpeaker: a speaker's findings count while it says Ready and its latest probe round is
// within FindingTTL of now, either way.
func liveSpeaker(s *porticov1.Speaker, now time.Time) bool {
	if !meta.IsStatusConditionTrue(s.Status.Conditions, porticov1.ConditionReady) || s.Status.ProbedAt == nil {
		return false
	}
	age := now.Sub(s.Status.ProbedAt.Time)
	return age <= FindingTTL && age >= -FindingTTL
}

func earlierHeard(a, b heard) bool {
	return cmp.Or(a.since.Compare(b.since.Time), a.addr.Compare(b.addr), cmp.Compare(a.seenBy, b.seenBy)) < 0
}

// InUseCondition names the pool's addresses a foreign host answers for, and the proxy
// answerers whose answers are ignored.
func InUseCondition(probes bool, inUse []porticov1.AddressInUse, proxies []porticov1.ProxyAnswerer) metav1.Condition {
	c := metav1.Condition{Type: porticov1.ConditionAddressesInUse, Status: metav1.ConditionFalse, Reason: porticov1.ReasonNoneInUse,
		Message: "no foreign host answers for the addresses probed"}
	if !probes {
		c.Reason, c.Message = porticov1.ReasonProbingDisabled, "conflictProbing is Disabled: no address is probed or held back"
		return c
	}
	var parts []string
	if len(inUse) > 0 {
		shown := make([]string, 0, 5)
		var macs []string
		for i, u := range inUse {
			if i < 5 {
				shown = append(shown, u.Address+" ("+u.MAC+")")
			}
			macs = append(macs, u.MAC)
		}
		slices.Sort(macs)
		c.Status, c.Reason = metav1.ConditionTrue, porticov1.ReasonAddressInUse
		parts = append(parts, fmt.Sprintf("in use by foreign hosts, not handed out while they answer (%d, from %s): %s; %s",
			len(inUse), allocator.NamedMACs(slices.Compact(macs)), strings.Join(shown, ", "), allocator.DisableProbingHint))
	}
	if len(proxies) > 0 {
		shown := make([]string, 0, len(proxies))
		for _, p := range proxies {
			shown = append(shown, fmt.Sprintf("%s (answers for %d)", p.MAC, p.Addresses))
		}
		if len(inUse) == 0 {
			c.Reason = porticov1.ReasonProxyAnswerer
		}
		parts = append(parts, fmt.Sprintf("taken for proxy ARP/NDP (seen answering for more than %d addresses), their answers hold nothing back: %s",
			proxyAnswererAddrs, strings.Join(shown, ", ")))
	}
	if len(parts) > 0 {
		c.Message = strings.Join(parts, "; ")
	}
	return c
}

// newlyProxy lists the proxy answerers of now not in before: one Warning event each.
func newlyProxy(before, now []porticov1.ProxyAnswerer) []porticov1.ProxyAnswerer {
	var out []porticov1.ProxyAnswerer
	for _, p := range now {
		if !slices.ContainsFunc(before, func(b porticov1.ProxyAnswerer) bool { return strings.EqualFold(b.MAC, p.MAC) }) {
			out = append(out, p)
		}
	}
	return out
}

// newlyInUse lists the entries of now whose address was not in before: one Warning event each.
func newlyInUse(before, now []porticov1.AddressInUse) []porticov1.AddressInUse {
	var out []porticov1.AddressInUse
	for _, u := range now {
		if !slices.ContainsFunc(before, func(b porticov1.AddressInUse) bool { return b.Address == u.Address }) {
			out = append(out, u)
		}
	}
	return out
}

// InUseIn picks the findings inside the named pool, at most MaxPoolAddressesInUse (the lowest).
func (b *Book) InUseIn(pool string, findings []Finding) []porticov1.AddressInUse {
	var out []porticov1.AddressInUse
	for _, f := range findings {
		if len(out) < porticov1.MaxPoolAddressesInUse && slices.Contains(b.PoolsContaining(f.Addr), pool) {
			out = append(out, f.AddressInUse)
		}
	}
	return out
}
