package status

import (
	"bytes"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/plugin"
)

// TestPrintHolds: the holds section lists each pool's holds as the controller wrote them in
// its status, and is left out when no pool holds anything. (The home lab's golden output, run
// against a real apiserver, has no hold: its end is a time of the run.)
func TestPrintHolds(t *testing.T) {
	until := metav1.NewTime(time.Date(2026, 12, 3, 14, 10, 0, 0, time.UTC))
	pools := []porticov1.IPAddressPool{
		{ObjectMeta: metav1.ObjectMeta{Name: "home-lab"}, Status: porticov1.IPAddressPoolStatus{Holds: []porticov1.AddressHoldEntry{
			{Address: "10.0.0.201", Namespace: "argocd", Name: "argocd-server", Until: until},
			{Address: "10.0.0.205", Namespace: "dns", Name: "pihole-udp", SharingKey: "pihole", Until: until},
		}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "spare"}},
	}
	var out bytes.Buffer
	printHolds(&plugin.Env{Out: &out}, pools)
	want := `
ADDRESSES HELD FOR DELETED SERVICES (given back to the Service created again under its name; to nobody else until the hold ends)
POOL      ADDRESS     SERVICE               SHARING-KEY  UNTIL
home-lab  10.0.0.201  argocd/argocd-server  -            2026-12-03T14:10:00Z
home-lab  10.0.0.205  dns/pihole-udp        pihole       2026-12-03T14:10:00Z
`
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
	out.Reset()
	printHolds(&plugin.Env{Out: &out}, pools[1:])
	if out.Len() != 0 {
		t.Errorf("no holds: got %q", out.String())
	}
}

// TestPrintHandoffs: the hand-offs section lists each Speaker's, and is left out when no
// speaker hands anything off.
func TestPrintHandoffs(t *testing.T) {
	until := metav1.NewTime(time.Date(2026, 12, 3, 14, 10, 0, 0, time.UTC))
	speakers := []porticov1.Speaker{
		{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}, Status: porticov1.SpeakerStatus{Handoffs: []porticov1.Handoff{
			{IP: "10.0.0.200", Node: "node-a", Via: "10.0.0.11", PickupUntil: &until},
			{IP: "10.0.0.201", Via: "10.0.0.13"},
		}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "node-c"}},
	}
	var out bytes.Buffer
	printHandoffs(&plugin.Env{Out: &out}, speakers)
	want := `
L2 HAND-OFFS (connections opened through the previous owner, passed on to it)
NODE    ADDRESS     FROM    VIA        PICKUP-UNTIL
node-b  10.0.0.200  node-a  10.0.0.11  2026-12-03T14:10:00Z
node-b  10.0.0.201  -       10.0.0.13  over
`
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
	out.Reset()
	printHandoffs(&plugin.Env{Out: &out}, speakers[1:])
	if out.Len() != 0 {
		t.Errorf("no hand-offs: got %q", out.String())
	}
}

// TestPrintFlowShares: the flow-sharing section lists each Speaker's latest round, what was
// missing from an incomplete one, and is left out when no speaker asked for one.
func TestPrintFlowShares(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 12, 3, 14, 10, 0, 0, time.UTC))
	speakers := []porticov1.Speaker{
		{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}, Status: porticov1.SpeakerStatus{FlowShare: &porticov1.FlowShare{
			At: at, Reason: "bgp-standing", Complete: false, Missing: []string{"node-a<-node-c", "node-c<-node-a"}, Members: 3,
			Took: metav1.Duration{Duration: 2 * time.Second}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "node-c"}, Status: porticov1.SpeakerStatus{FlowShare: &porticov1.FlowShare{
			At: at, Reason: "bgp-standing", Complete: true, Members: 3, Took: metav1.Duration{Duration: 31 * time.Millisecond}}}},
	}
	var out bytes.Buffer
	printFlowShares(&plugin.Env{Out: &out}, speakers)
	want := `
BGP FLOW SHARING (the latest round each node asked for before its routes changed)
NODE    AT                    REASON        MEMBERS  RESULT      TOOK  MISSING
node-b  2026-12-03T14:10:00Z  bgp-standing  3        incomplete  2s    node-a<-node-c,node-c<-node-a
node-c  2026-12-03T14:10:00Z  bgp-standing  3        complete    31ms  -
`
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
	out.Reset()
	printFlowShares(&plugin.Env{Out: &out}, speakers[:1])
	if out.Len() != 0 {
		t.Errorf("no rounds: got %q", out.String())
	}
}

// TestSpeakerProblems: a speaker running without part of its packet path (its DataPath,
// HandoffMarks or StrictARP condition False) shows it in PROBLEMS beside its configErrors;
// Ready (its own column) and conditions that are True do not.
func TestSpeakerProblems(t *testing.T) {
	s := porticov1.Speaker{Status: porticov1.SpeakerStatus{
		ConfigErrors: []string{"bgpPeer tor-a: passwordSecret portico-system/tor-a cannot be read"},
		Conditions: []metav1.Condition{
			{Type: porticov1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Running", Message: "running"},
			{Type: porticov1.ConditionDataPath, Status: metav1.ConditionFalse, Reason: porticov1.ReasonNftablesUnavailable,
				Message: "nftables: the forwarding guard's table could not be made (not supported)"},
			{Type: porticov1.ConditionStrictARP, Status: metav1.ConditionTrue, Reason: "StrictARP", Message: "arp_ignore=1"},
		}}}
	want := "bgpPeer tor-a: passwordSecret portico-system/tor-a cannot be read; " +
		"DataPath NftablesUnavailable: nftables: the forwarding guard's table could not be made (not supported)"
	if got := speakerProblems(&s); got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	if got := speakerProblems(&porticov1.Speaker{}); got != "" {
		t.Errorf("no problem: got %q", got)
	}
}
