package controlplane

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/portico-lb/portico/speaker/plan"
)

// report is what a member tells the others of itself (plan.MemberReport), over the gossip's
// stream (membership.Group.Send), in clear: the mode's configuration has no gossip key yet.
type report struct {
	Kind     string    `json:"kind"` // reportKind: the gossip's messages may carry other kinds
	Node     string    `json:"node"`
	Eligible bool      `json:"eligible"`
	Holding  time.Time `json:"holding,omitzero"`
}

const reportKind = "portico-control-plane-report"

func (r report) member() plan.MemberReport {
	return plan.MemberReport{Eligible: r.Eligible, Holding: r.Holding}
}

func (r report) encode() []byte {
	b, _ := json.Marshal(r) // a struct of plain fields always encodes
	return b
}

func decodeReport(msg []byte) (report, error) {
	var r report
	if err := json.Unmarshal(msg, &r); err != nil {
		return r, err
	}
	if r.Kind != reportKind || r.Node == "" {
		return r, fmt.Errorf("not a control-plane report")
	}
	return r, nil
}
