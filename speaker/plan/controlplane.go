package plan

import (
	"net/netip"
	"slices"
	"time"

	"github.com/portico-lb/portico/rules"
	"github.com/portico-lb/portico/rules/election"
)

// ControlPlaneShare names the control-plane VIP's one "Service" in the owner rule.
const ControlPlaneShare = "control-plane"

// MemberReport is what a control-plane member last said of itself (the control-plane mode
// gossips it): whether its apiserver lets it hold the VIP (APIReady), and since when it holds
// the VIP (zero: it does not).
type MemberReport struct {
	Eligible bool
	Holding  time.Time
}

// ControlPlaneView is what a control-plane member knows when it decides who holds the VIP.
type ControlPlaneView struct {
	VIP netip.Addr
	// Members are the configured control-plane nodes; Alive says which the gossip sees alive
	// (this node always is).
	Members []string
	Alive   func(string) bool
	// Reports are the members' latest reports, this node's own included; a member not heard from
	// yet is not eligible.
	Reports map[string]MemberReport
}

// ControlPlaneVIP is who holds the VIP and among whom it was elected.
type ControlPlaneVIP struct {
	Owner    string   // "" when no member is eligible
	Eligible []string // the live members whose apiserver answers, sorted
}

// ControlPlaneOwner elects the member that answers for the VIP, with the rule every Service
// address is elected by (rules.L2Owner): among the live members whose apiserver answers, the
// one holding it keeps it (so a member whose apiserver comes back takes nothing back), else the
// hash picks. Every member that sees the same members and reports elects the same owner.
func ControlPlaneOwner(v ControlPlaneView) ControlPlaneVIP {
	var out ControlPlaneVIP
	var holders []election.Holder
	for _, m := range v.Members {
		r, heard := v.Reports[m]
		if !heard || !r.Eligible || !v.Alive(m) {
			continue
		}
		out.Eligible = append(out.Eligible, m)
		if !r.Holding.IsZero() {
			holders = append(holders, election.Holder{Node: m, Since: r.Holding})
		}
	}
	slices.Sort(out.Eligible)
	if len(out.Eligible) == 0 {
		return out
	}
	share := rules.L2Share{Service: ControlPlaneShare, Eligible: out.Eligible}
	out.Owner = rules.L2Owner(v.VIP, []rules.L2Share{share}, nil, holders).Owner
	return out
}

// ControlPlaneLinger bounds how long a member that lost the VIP keeps it a local address.
const ControlPlaneLinger = time.Second

// KeepLocal says whether member self, which stopped answering for the VIP at released (zero:
// it did not), still keeps the VIP a local address at now: until the owner elected in got
// says it holds the VIP, for ControlPlaneLinger at most. Meanwhile a client whose ARP cache
// still names self's node has its connections refused at once (or served, while that node's
// apiserver answers) rather than lost in silence, and retries, until the new owner's
// announcement reaches it.
func (got ControlPlaneVIP) KeepLocal(v ControlPlaneView, self string, released, now time.Time) bool {
	if released.IsZero() || got.Owner == self {
		return false
	}
	if got.Owner != "" && !v.Reports[got.Owner].Holding.IsZero() {
		return false
	}
	return now.Sub(released) < ControlPlaneLinger
}
