package plan

import "fmt"

// APIReady says whether this node may hold the control-plane VIP (the control-plane mode,
// package controlplane): only while its own apiserver answers /readyz. One check's result does
// not decide: Failures failures in a row make the node ineligible, Successes successes in a row
// make it eligible again, so that one slow answer does not move the VIP and an apiserver that
// flaps does not pull it back at every answer. A node starts ineligible (its apiserver may not be
// up yet) and becomes eligible like one returning.
type APIReady struct {
	Failures, Successes int // the hysteresis, each at least 1
	eligible            bool
	run                 int    // checks in a row that went against eligible
	last                string // the last failure's reason
}

// NewAPIReady starts ineligible, with the hysteresis given (each raised to at least 1).
func NewAPIReady(failures, successes int) APIReady {
	return APIReady{Failures: max(failures, 1), Successes: max(successes, 1), last: "not checked yet"}
}

// Observe takes one check's result (failure: why it failed, "" for a success) and reports
// whether the node's eligibility changed.
func (r *APIReady) Observe(failure string) (changed bool) {
	ok := failure == ""
	if !ok {
		r.last = failure
	}
	if ok == r.eligible {
		r.run = 0
		return false
	}
	r.run++
	need := r.Successes
	if r.eligible {
		need = r.Failures
	}
	if r.run < need {
		return false
	}
	r.eligible, r.run = ok, 0
	return true
}

// Eligible reports whether the node may hold the VIP.
func (r APIReady) Eligible() bool { return r.eligible }

// String says where the node stands, for logs and the transcripts.
func (r APIReady) String() string {
	if r.eligible {
		if r.run > 0 {
			return fmt.Sprintf("eligible (%d of %d failures to leave: %s)", r.run, r.Failures, r.last)
		}
		return "eligible"
	}
	if r.run > 0 {
		return fmt.Sprintf("ineligible (%d of %d successes to return; last failure: %s)", r.run, r.Successes, r.last)
	}
	return "ineligible: " + r.last
}
