package controller_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

func waitReachable(t *testing.T, ns, name string, status metav1.ConditionStatus, reason, message string) {
	t.Helper()
	waitCondition(t, ns, name, porticov1.ConditionReachable, status, reason, message)
}

// probed sets a speaker's self-check result for ip.
func probed(t *testing.T, s *porticov1.Speaker, ip string, macs ...string) {
	t.Helper()
	setSelfCheck(t, s, porticov1.SelfCheck{IP: ip, MACs: macs})
}

func setSelfCheck(t *testing.T, s *porticov1.Speaker, c porticov1.SelfCheck) {
	t.Helper()
	c.Time = metav1.NewTime(time.Now().Truncate(time.Second))
	setSpeakerStatus(t, s, func(st *porticov1.SpeakerStatus) { st.SelfChecks = []porticov1.SelfCheck{c} })
}

func speakerWith(t *testing.T, node, mac string, ann ...porticov1.Announcement) *porticov1.Speaker {
	t.Helper()
	s := &porticov1.Speaker{ObjectMeta: metav1.ObjectMeta{Name: node}}
	create(t, s)
	s.Status.HardwareAddrs = []string{mac}
	s.Status.Announcements = ann
	if err := cp.Client.Status().Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	return s
}

// reachableChanges reads portico_service_condition_changes_total for Reachable and a reason.
func reachableChanges(t *testing.T, reg prometheus.Gatherer, reason string) float64 {
	t.Helper()
	v, _ := sample(t, reg, "portico_service_condition_changes_total",
		map[string]string{"condition": porticov1.ConditionReachable, "reason": reason})
	return v
}

// TestReachable walks one Service through every reason of Reachable, from what the speakers
// report hearing when they probe its address: nothing probed, nobody answers, the owner
// answers, two speakers answer, a foreign MAC answers, a speaker that does not announce it
// answers.
func TestReachable(t *testing.T) {
	reg := startManager(t)
	createPool(t, "reach", addresses("203.0.113.30-203.0.113.40"))
	ns := namespace(t, nil)
	createService(t, ns, "web")
	waitIPs(t, ns, "web", "203.0.113.30")
	const ip = "203.0.113.30"
	announce := porticov1.Announcement{IP: ip, Service: ns + "/web", Protocol: porticov1.ProtocolL2, Interfaces: []string{"eth0"}}
	speakerWith(t, "reach-a", "02:00:00:00:00:0a", announce)
	b := speakerWith(t, "reach-b", "02:00:00:00:00:0b")
	speakerWith(t, "reach-c", "02:00:00:00:00:0c")
	waitReachable(t, ns, "web", metav1.ConditionUnknown, porticov1.ReasonNotProbed,
		"no speaker reports a probe of 203.0.113.30 (self-check switched off, or no node besides the owner)")

	probed(t, b, ip)
	waitReachable(t, ns, "web", metav1.ConditionFalse, porticov1.ReasonNoAnswer,
		"203.0.113.30: nobody answered (expected reach-a; probed by reach-b)")
	probed(t, b, ip, "02:00:00:00:00:0A")
	waitReachable(t, ns, "web", metav1.ConditionTrue, porticov1.ReasonAnswered,
		"203.0.113.30: answered by reach-a (02:00:00:00:00:0a) only (probed by reach-b)")
	probed(t, b, ip, "02:00:00:00:00:0a", "02:00:00:00:00:0c")
	waitReachable(t, ns, "web", metav1.ConditionFalse, porticov1.ReasonMultipleAnswers,
		"203.0.113.30: reach-a (02:00:00:00:00:0a) and reach-c (02:00:00:00:00:0c) all answer: split brain (probed by reach-b)")

	before := reachableChanges(t, reg, porticov1.ReasonForeignAnswer)
	probed(t, b, ip, "02:00:00:00:00:0a", "52:54:00:12:34:56")
	waitReachable(t, ns, "web", metav1.ConditionFalse, porticov1.ReasonForeignAnswer,
		"203.0.113.30: 52:54:00:12:34:56 answered, which no speaker owns: another host uses the address (probed by reach-b)")
	waitEvent(t, ns, "web", porticov1.ReasonForeignAnswer, "52:54:00:12:34:56 answered, which no speaker owns")
	if after := reachableChanges(t, reg, porticov1.ReasonForeignAnswer); after != before+1 {
		t.Errorf("portico_service_condition_changes_total{Reachable,ForeignAnswer} went %v → %v, want +1", before, after)
	}

	probed(t, b, ip, "02:00:00:00:00:0c")
	waitReachable(t, ns, "web", metav1.ConditionFalse, porticov1.ReasonStaleAnswer,
		"203.0.113.30: answered by reach-c (02:00:00:00:00:0c), which does not announce it (announced by reach-a) (probed by reach-b)")

	// A cut list (a speaker lists at most MaxSelfCheckMACs MACs and counts the others) still
	// names the problem: a foreign MAC among those listed, or several nodes.
	speakerWith(t, "reach-d", "02:00:00:00:00:0d")
	probedTruncated(t, b, ip, 996, "02:00:00:00:00:0a", "02:00:00:00:00:0c", "52:54:00:00:00:01", "52:54:00:00:00:02")
	waitReachable(t, ns, "web", metav1.ConditionFalse, porticov1.ReasonForeignAnswer,
		"203.0.113.30: 52:54:00:00:00:01,52:54:00:00:00:02 answered, which no speaker owns: another host uses the address (probed by reach-b)")
	probedTruncated(t, b, ip, 3, "02:00:00:00:00:0a", "02:00:00:00:00:0b", "02:00:00:00:00:0c", "02:00:00:00:00:0d")
	waitReachable(t, ns, "web", metav1.ConditionFalse, porticov1.ReasonMultipleAnswers,
		"203.0.113.30: reach-a (02:00:00:00:00:0a) and reach-b (02:00:00:00:00:0b) and reach-c (02:00:00:00:00:0c) and reach-d (02:00:00:00:00:0d) all answer: split brain (probed by reach-b)")
}

// probedTruncated sets a speaker's self-check result for ip as the speaker cuts a long list:
// the listed MACs and a count of the others.
func probedTruncated(t *testing.T, s *porticov1.Speaker, ip string, omitted int32, macs ...string) {
	t.Helper()
	if len(macs) != porticov1.MaxSelfCheckMACs {
		t.Fatalf("a cut list holds %d MACs, not %d", porticov1.MaxSelfCheckMACs, len(macs))
	}
	setSelfCheck(t, s, porticov1.SelfCheck{IP: ip, MACs: macs, OmittedMACs: omitted})
}
