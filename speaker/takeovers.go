package speaker

import (
	"errors"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/speaker/handoff"
	"github.com/portico-lb/portico/speaker/plan"
)

// Handoff passes the flows of an address this node took over, that it has no state for, to the
// node that answered for it before (package handoff), so that the clients' open connections
// survive the move. A nil Handoff leaves them to the service proxy, which resets them.
type Handoff interface {
	Set(addr, via netip.Addr, grace time.Duration) error
	Remove(addr netip.Addr) error
	Adopted() []handoff.Entry
	// ForgetClosed deletes this node's entries of connections to addr that are over, which
	// would catch a handed-off connection reusing their client ports.
	ForgetClosed(addr netip.Addr) error
	Release() error
	// Clear removes the table, rules, routes and marked connection-tracking entries: no
	// speaker follows on this node.
	Clear() error
	// HeldFlows and SetFlows are flow sharing's (flowshare.go): the flows this node holds,
	// and those another node holds, listed to be handed to it.
	HeldFlows(addrs []netip.Addr, max int) (map[netip.Addr][]handoff.Flow, error)
	SetFlows(via netip.Addr, flows []handoff.Flow, grace time.Duration) (int, error)
	// HoldBack drops for d the packets to addrs of flows neither held nor listed here, while a
	// round of flow sharing is on.
	HoldBack(addrs []netip.Addr, d time.Duration) error
	// Slots and RemoveSlot: the node addresses flows are handed to, one given back.
	Slots() map[int]netip.Addr
	RemoveSlot(via netip.Addr) error
}

// takeovers is the speaker's side of the hand-off: it carries out the plan's takeover steps
// (plan.Planner.Takeovers) on the Handoff, and keeps the takeovers this node holds. nil: the
// node has no hand-off.
type takeovers struct {
	handoff Handoff
	times   plan.TakeoverTimes
	held    map[netip.Addr]plan.Takeover
	wake    alarm // plans everything again when the earliest linger ends
	log     logr.Logger
	metrics *Metrics
}

// DefaultHandoffLinger is how long an entry outlives its node's answering for the address again. The
// clients' packets still come here until they learn the address's new MAC: at once from the
// gratuitous ARP/NA for most, at their next neighbour probe for those that ignore it (Linux:
// reachable for up to 45 s, then 5 s of delay and 3 s of probes); meanwhile the entry passes
// the flows it handed off on to the node that holds them, which is where they belong again.
// Removed at once, those packets found no entry and no pick-up, the service proxy took them
// up afresh and the backend reset them (seen on the kubelet cluster: 48 of 50 connections
// reset when a killed speaker came back and took its address again).
const DefaultHandoffLinger = time.Minute

// newTakeovers adopts the entries an earlier run left; the first plan keeps those still true.
func newTakeovers(h Handoff, times plan.TakeoverTimes, log logr.Logger, metrics *Metrics) *takeovers {
	if h == nil {
		return nil
	}
	t := &takeovers{handoff: h, times: times, held: map[netip.Addr]plan.Takeover{}, log: log, metrics: metrics}
	for _, e := range h.Adopted() {
		t.held[e.Addr] = plan.Takeover{Via: e.Via, Until: e.Expires}
	}
	return t
}

// apply ends, keeps and starts the takeovers as steps says, before the node answers for the
// addresses it gains, so that their first handed-off packets find the entry; replan is called
// when the earliest linger ends.
func (t *takeovers) apply(steps plan.TakeoverSteps, replan func()) {
	t.held = steps.Keep
	for _, ip := range slices.SortedFunc(maps.Keys(steps.End), netip.Addr.Compare) {
		e := steps.End[ip]
		if err := t.handoff.Remove(ip); err != nil {
			t.log.Error(err, "ending a hand-off", "ip", ip, "to", e.Via)
			if !errors.Is(err, handoff.ErrEntriesLeft) {
				t.held[ip] = e // tried again at the next plan
				continue
			}
		}
		t.log.Info("no longer handing off flows", "ip", ip, "to", e.Via, "node", e.Node)
	}
	for _, ip := range slices.SortedFunc(maps.Keys(steps.NoAddress), netip.Addr.Compare) {
		t.log.Info("not handing off flows: the previous owner has no InternalIP of the address's family", "ip", ip, "node", steps.NoAddress[ip])
	}
	for _, ip := range slices.SortedFunc(maps.Keys(steps.Start), netip.Addr.Compare) {
		e := steps.Start[ip]
		if err := t.handoff.Set(ip, e.Via, t.times.Grace); err != nil {
			t.log.Error(err, "handing off flows", "ip", ip, "to", e.Via, "node", e.Node)
			continue
		}
		t.held[ip] = e
		go func() { // a read of the whole table: not before the node answers
			if err := t.handoff.ForgetClosed(ip); err != nil {
				t.log.Error(err, "deleting this node's entries of closed connections to an address taken over", "ip", ip)
			}
		}()
		t.metrics.takeovers.Inc()
		t.log.Info("handing off the flows this node has no state for", "ip", ip, "to", e.Via, "node", e.Node, "for", t.times.Grace)
	}
	t.metrics.takeoversHeld.Set(float64(len(t.held)))
	t.wake.at(steps.LingerEnds, replan)
}

// status lists the takeovers for the Speaker status, sorted by address (nil: none, or no
// hand-off).
func (t *takeovers) status() []v1alpha1.Handoff {
	if t == nil || len(t.held) == 0 {
		return nil
	}
	out := make([]v1alpha1.Handoff, 0, len(t.held))
	for _, ip := range slices.SortedFunc(maps.Keys(t.held), netip.Addr.Compare) {
		e := t.held[ip]
		st := v1alpha1.Handoff{IP: ip.String(), Node: e.Node, Via: e.Via.String()}
		if !e.Until.IsZero() {
			st.PickupUntil = &metav1.Time{Time: e.Until.Truncate(time.Second)}
		}
		out = append(out, st)
	}
	return out[:min(len(out), maxHandoffsListed)]
}

// maxHandoffsListed is the API's bound on status.handoffs.
const maxHandoffsListed = 1024

// end leaves the hand-off's kernel state to the next speaker on this node (a restart: it adopts
// it, and the flows handed off keep their way meanwhile), or removes it all, as the plan's stop
// says (Stop.ClearsHandoff: no speaker follows, or the next one runs no hand-off).
func (t *takeovers) end(stop plan.Stop) {
	if t == nil {
		return
	}
	clear, reason := stop.ClearsHandoff()
	if !clear {
		if err := t.handoff.Release(); err != nil {
			t.log.Error(err, "releasing the hand-off")
		}
		return
	}
	if err := t.handoff.Clear(); err != nil {
		t.log.Error(err, "removing the hand-off's table, rules, routes and marked entries", "reason", reason)
		return
	}
	t.log.Info("removed the hand-off's table, rules, routes and marked entries: no speaker follows on this node", "reason", reason)
}
