package controlplane

import (
	"context"
	"errors"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/portico-lb/portico/speaker/controlplane/cpconfig"
	"github.com/portico-lb/portico/speaker/membership"
	"github.com/portico-lb/portico/speaker/plan"
)

// resend is how often a member tells every other its report again, and rejoins the members it
// does not see: a report lost (a member restarting between two) is corrected within it.
const resend = 500 * time.Millisecond

// Mode is one control-plane node's speaker in control-plane mode.
type Mode struct {
	Config   cpconfig.Config
	Node     string
	Group    *membership.Group // started with Admit and Message below
	Announce Announcer
	Log      logr.Logger

	check   *readyzCheck
	ready   plan.APIReady
	reports map[string]plan.MemberReport
	heard   chan report
	checked chan string
	side    vipSide
	holding time.Time // since when this node holds the VIP; zero: it does not
	// released is when this node stopped answering for the VIP while keeping it on lo
	// (plan.ControlPlaneVIP.KeepLocal); zero: it has no such address
	released time.Time
	stopping bool        // ctx ended: this node may no longer hold the VIP
	joining  atomic.Bool // a join is still waiting on an unreachable member
}

// New prepares the mode for node: it reads the CA, removes a VIP an earlier run left on lo and
// keeps the kernel from answering ARP for the VIP (quietKernelARP).
func New(c cpconfig.Config, node string, announce Announcer, log logr.Logger) (*Mode, error) {
	if _, ok := c.Self(node); !ok {
		return nil, errors.New("control-plane mode: this node (" + node + ") is not among the configuration's members")
	}
	check, err := newReadyzCheck(c.Readyz)
	if err != nil {
		return nil, err
	}
	m := &Mode{Config: c, Node: node, Announce: announce, Log: log, check: check,
		ready:   plan.NewAPIReady(c.Readyz.Failures, c.Readyz.Successes),
		reports: map[string]plan.MemberReport{}, heard: make(chan report, 64), checked: make(chan string, 1),
		side: vipSide{vip: c.VIP, announce: announce}}
	if c.Interface != "" {
		m.side.ifaces = []string{c.Interface}
	}
	if err := m.side.local(false); err != nil {
		return nil, err
	}
	return m, quietKernelARP(c.VIP)
}

// Admit lets only the configured members join, each from its configured address.
func (m *Mode) Admit(name string, addr netip.Addr) error {
	self, ok := m.Config.Self(name)
	if !ok {
		return errors.New("not a control-plane member")
	}
	if self.Address != addr.Unmap() {
		return errors.New("not the member's configured address " + self.Address.String())
	}
	return nil
}

// Message takes another member's report (membership.Config.Message).
func (m *Mode) Message(msg []byte) {
	r, err := decodeReport(msg)
	if err != nil {
		m.Log.V(1).Info("ignoring a gossip message", "error", err.Error())
		return
	}
	select {
	case m.heard <- r:
	default: // the loop is behind; the next resend carries the news again
	}
}

// Run checks the apiserver, gossips and holds or releases the VIP until ctx ends; then it
// releases the VIP and leaves the group, so another member takes it at once.
func (m *Mode) Run(ctx context.Context) {
	m.join()
	go m.checkLoop(ctx)
	tick := time.NewTicker(resend)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			m.stop()
			return
		case failure := <-m.checked:
			if m.ready.Observe(failure) {
				m.Log.Info("apiserver readiness changed", "state", m.ready.String())
				m.decide("readyz")
				m.tell()
			}
		case r := <-m.heard:
			m.reports[r.Node] = r.member()
			m.decide("report")
		case ch := <-m.Group.Changes():
			m.Log.Info("membership changed", "member", ch.Name, "alive", ch.Joined, "how", ch.How)
			m.decide("membership")
			if ch.Joined {
				m.tellOne(ch.Name)
			}
		case <-tick.C:
			m.join()
			m.tell()
			if !m.released.IsZero() {
				m.decide("linger") // plan.ControlPlaneLinger bounds the local address kept
			}
		}
	}
}

// checkLoop checks the apiserver every interval and hands each result to the loop.
func (m *Mode) checkLoop(ctx context.Context) {
	t := time.NewTicker(time.Duration(m.Config.Readyz.Interval))
	defer t.Stop()
	for {
		failure := m.check.check(ctx)
		select {
		case m.checked <- failure:
		case <-ctx.Done():
			return
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// decide elects the VIP's owner from what this node knows and has the side follow it.
func (m *Mode) decide(cause string) {
	m.reports[m.Node] = m.own().member()
	view := plan.ControlPlaneView{VIP: m.Config.VIP, Members: m.Config.Names(),
		Alive: func(n string) bool { return n == m.Node || m.Group.IsAlive(n) }, Reports: m.reports}
	got := plan.ControlPlaneOwner(view)
	defer m.dropLocal(got, view)
	mine := got.Owner == m.Node
	if mine == !m.holding.IsZero() {
		return
	}
	var problems []error
	if mine {
		m.holding, m.released = time.Now(), time.Time{}
		problems = m.side.take()
		m.Log.Info("holding the VIP", "vip", m.Config.VIP, "cause", cause, "eligible", got.Eligible)
	} else {
		m.holding, m.released = time.Time{}, time.Now()
		problems = m.side.release()
		m.Log.Info("released the VIP", "vip", m.Config.VIP, "cause", cause, "owner", got.Owner, "eligible", got.Eligible)
	}
	for _, err := range problems {
		m.Log.Error(err, "applying the VIP's owner")
	}
	m.reports[m.Node] = m.own().member()
	m.tell()
}

// dropLocal removes the VIP from lo once this node, which released it, need keep it no longer.
func (m *Mode) dropLocal(got plan.ControlPlaneVIP, view plan.ControlPlaneView) {
	if m.released.IsZero() || got.KeepLocal(view, m.Node, m.released, time.Now()) {
		return
	}
	m.Log.Info("dropped the VIP's local address", "vip", m.Config.VIP, "owner", got.Owner, "after", time.Since(m.released).String())
	m.released = time.Time{}
	if err := m.side.local(false); err != nil {
		m.Log.Error(err, "dropping the VIP's local address")
	}
}

func (m *Mode) own() report {
	return report{Kind: reportKind, Node: m.Node, Eligible: m.ready.Eligible() && !m.stopping, Holding: m.holding}
}

// tell sends this node's report to every other live member.
func (m *Mode) tell() {
	for _, n := range m.Config.Names() {
		if n != m.Node && m.Group.IsAlive(n) {
			m.tellOne(n)
		}
	}
}

// tellOne sends this node's report to member n, from its own goroutine: a member that stopped
// answering must not hold the loop for the stream's timeout.
func (m *Mode) tellOne(n string) {
	msg := m.own().encode()
	go func() {
		if err := m.Group.Send(n, msg); err != nil {
			m.Log.V(1).Info("telling a member", "member", n, "error", err.Error())
		}
	}()
}

// join contacts the configured members not alive.
func (m *Mode) join() {
	var peers []string
	for _, mem := range m.Config.Members {
		if mem.Name != m.Node && !m.Group.IsAlive(mem.Name) {
			peers = append(peers, membership.HostPort(mem.Address.String(), m.Config.GossipPort))
		}
	}
	if len(peers) == 0 || !m.joining.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer m.joining.Store(false)
		_ = m.Group.Join(peers)
	}()
}

// stop hands the VIP over: it stops answering at once and tells the others it may no longer
// hold it, keeps it on lo until the new owner says it holds it (as any release does, a second
// at most), then drops it and says goodbye.
func (m *Mode) stop() {
	m.Announce.Silence()
	m.stopping = true
	if !m.holding.IsZero() {
		m.holding, m.released = time.Time{}, time.Now()
		m.Log.Info("stopping: handing the VIP over", "vip", m.Config.VIP)
	}
	m.tell()
	m.awaitOwner()
	if err := m.side.local(false); err != nil {
		m.Log.Error(err, "stopping")
	}
	m.released = time.Time{}
	_ = m.Group.Leave(time.Second)
	_ = m.Announce.Close()
}

// awaitOwner takes the members' reports until this node need no longer keep the VIP on lo.
func (m *Mode) awaitOwner() {
	linger := time.NewTimer(plan.ControlPlaneLinger)
	defer linger.Stop()
	for !m.released.IsZero() {
		select {
		case r := <-m.heard:
			m.reports[r.Node] = r.member()
			m.decide("stopping")
		case <-linger.C:
			return
		}
	}
}
