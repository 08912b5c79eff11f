package status

import (
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/speaker/plan"
)

// WriteInterval is the least time between two writes of the Speaker status. A status
// listing many entries waits longer, writePerEntry more for each (up to
// maxWriteInterval): the apiserver decodes, validates and stores a CRD's status whole, in
// JSON, so during a burst a node listing 1000 addresses cost the apiserver more than the
// burst's own writes (BENCHMARKS.md, "The Speaker status paced by its size"). A change after a
// quiet spell is written at once; only a burst waits.
const (
	WriteInterval    = 500 * time.Millisecond
	writePerEntry    = time.Millisecond
	maxWriteInterval = 10 * time.Second
)

// WritePause is the least time from a write of st to the next write.
func WritePause(st v1alpha1.SpeakerStatus) time.Duration {
	n := len(st.Announcements) + len(st.SelfChecks) + len(st.ForeignAnswers)
	if st.BGP != nil {
		n += len(st.BGP.Routes)
	}
	return min(WriteInterval+time.Duration(n)*writePerEntry, maxWriteInterval)
}

// Report is one Speaker status to write: the status, its Ready condition and its StrictARP one.
type Report struct {
	Status    v1alpha1.SpeakerStatus
	Ready     metav1.Condition
	StrictARP *metav1.Condition // nil: no kube-ipvs0 here
	// Listed is the View generation of the announcements and routes (0: unknown): the writer
	// fills them in (View.Fill) when it writes.
	Listed uint64
}

// View is the Speaker status's announcements, kept between reports by address, and its
// BGP routes, by prefix: a change rewrites the entries it touched, and the lists are made only
// when the status is written (at most once per WritePause), not on every change; gen counts the
// changes, so the status writer tells changed lists without comparing them. The status writer
// reads it from its own goroutine, hence the lock.
type View struct {
	mu         sync.Mutex
	l2, bgp    map[netip.Addr][]v1alpha1.Announcement
	routes     map[netip.Prefix][]v1alpha1.AdvertisedRoute
	aggregates map[netip.Prefix]bool // the routed prefixes of more than one address, listed here or not
	gen        uint64
}

// OfPlan is what the Speaker status says of a plan: its announcements (L2 on the
// interfaces answered, then BGP), its problems, and Ready. It reads nothing else, so the L2
// transcripts print exactly what a node writes.
func OfPlan(p plan.Plan, answered map[netip.Addr][]string) Report {
	var v View
	v.Update(p, answered, sortedAddrs(p.Mine), sortedAddrs(p.Routed), nil, true, time.Time{})
	r := v.Report(p, p.Problems)
	r.Status.BGP = BGPPeers(p.BGP, nil)
	r.Listed = v.Fill(&r.Status)
	return r
}

// Update rewrites the entries of the addresses in mine (L2) and routed (BGP) and of the routes
// (see updateRoutes); the generation moves when an entry changed. An L2 address this node
// begins answering for at now is listed since now (none when now is zero), one it goes on
// answering for keeps its since: the owner rule keeps an address with its latest taker.
func (v *View) Update(p plan.Plan, answered map[netip.Addr][]string, mine, routed []netip.Addr, prefixes []netip.Prefix, all bool, now time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.l2 == nil {
		v.l2, v.bgp = map[netip.Addr][]v1alpha1.Announcement{}, map[netip.Addr][]v1alpha1.Announcement{}
		v.routes, v.aggregates = map[netip.Prefix][]v1alpha1.AdvertisedRoute{}, map[netip.Prefix]bool{}
		v.gen++
	}
	v.updateRoutes(p, routed, prefixes, all)
	// One entry per Service: Services sharing an address each find themselves.
	for _, ip := range mine {
		var entries []v1alpha1.Announcement
		var since *metav1.Time
		if old := v.l2[ip]; len(old) > 0 {
			since = old[0].Since
		} else if !now.IsZero() {
			since = &metav1.Time{Time: now.Truncate(time.Second)}
		}
		for _, svc := range p.Mine[ip].Services {
			entries = append(entries, v1alpha1.Announcement{IP: ip.String(), Service: svc, Protocol: v1alpha1.ProtocolL2, Interfaces: answered[ip], Since: since})
		}
		setEntries(v, v.l2, ip, entries)
	}
	// BGP: every advertising node advertises the same, so only the teller lists an address;
	// one Service changing rewrites one Speaker, however many nodes advertise it.
	for _, ip := range routed {
		var entries []v1alpha1.Announcement
		if c := p.Routed[ip]; c.Teller {
			for _, svc := range c.Services {
				entries = append(entries, v1alpha1.Announcement{IP: ip.String(), Service: svc, Protocol: v1alpha1.ProtocolBGP, Peers: c.Peers})
			}
		}
		setEntries(v, v.bgp, ip, entries)
	}
}

// setEntries replaces the entries of k in m (none: k goes), moving v's generation when they
// changed. The caller holds v.mu.
func setEntries[K comparable, E any](v *View, m map[K][]E, k K, entries []E) {
	if apiequality.Semantic.DeepEqual(m[k], entries) {
		return
	}
	v.gen++
	if len(entries) == 0 {
		delete(m, k)
	} else {
		m[k] = entries
	}
}

// Fill sets st's announcements as the status lists them (L2 by address, then BGP by address)
// and, when st has a BGP part, its routes, and returns their generation.
func (v *View) Fill(st *v1alpha1.SpeakerStatus) uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []v1alpha1.Announcement
	for _, m := range []map[netip.Addr][]v1alpha1.Announcement{v.l2, v.bgp} {
		for _, ip := range sortedAddrs(m) {
			out = append(out, m[ip]...)
		}
	}
	st.Announcements = out
	if st.BGP != nil {
		b := *st.BGP
		b.Routes, b.OmittedRoutes = v.listRoutes()
		st.BGP = &b
	}
	return v.gen
}

// Report is the status of the announcements of generation listed (the list itself is made
// when it is written), with problems and the Ready they make.
func (v *View) Report(p plan.Plan, problems []string) Report {
	st := v1alpha1.SpeakerStatus{ConfigErrors: problems, L2Announcements: int32(len(p.Mine))}
	ready := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Running", Message: "answering for its addresses"}
	if len(problems) > 0 {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, "ConfigErrors", problems[0]
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return Report{Status: st, Ready: ready, Listed: v.gen}
}

// Same compares two reports; the announcements and routes by their generation when both
// have one (one of them may not be listed yet).
func Same(a, b Report) bool {
	if a.Listed != 0 && b.Listed != 0 {
		if a.Listed != b.Listed {
			return false
		}
		a.Status, b.Status = unlisted(a.Status), unlisted(b.Status)
	}
	return a.Ready.Status == b.Ready.Status && a.Ready.Message == b.Ready.Message && apiequality.Semantic.DeepEqual(a.Status, b.Status) &&
		apiequality.Semantic.DeepEqual(a.StrictARP, b.StrictARP)
}

// unlisted is st without the lists View makes.
func unlisted(st v1alpha1.SpeakerStatus) v1alpha1.SpeakerStatus {
	st.Announcements = nil
	if st.BGP != nil {
		b := *st.BGP
		b.Routes, b.OmittedRoutes = nil, 0
		st.BGP = &b
	}
	return st
}

// sortedAddrs are the addresses m holds, sorted.
func sortedAddrs[E any](m map[netip.Addr]E) []netip.Addr {
	return slices.SortedFunc(maps.Keys(m), netip.Addr.Compare)
}
