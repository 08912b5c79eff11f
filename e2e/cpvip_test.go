package e2e

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/portico-lb/portico/internal/netlab"
)

// TestControlPlaneVIP runs the control-plane mode with real parts (docs/control-plane.md): three
// control-plane nodes, each with its kube-apiserver and its speaker, and a client that knows
// only the VIP. A cold start brings the VIP to the first node whose apiserver is ready; the
// others becoming ready take nothing from it; when the holder's apiserver is killed, when its
// speaker stops, when its apiserver stops answering, when its link is cut and when its speaker
// is frozen, the VIP moves to another ready node and is answered by that node alone; once the
// link is back or the frozen speaker runs again, one node alone holds and answers it. The
// client's longest failed interval is measured each time and logged, never asserted: the test
// asserts only that the client recovers.
func TestControlPlaneVIP(t *testing.T) {
	netlab.Require(t, "arping", "setpriv")
	parallel(t)
	lab := newCPLab(t)
	harness := lab.httpsIn(lab.etcd.NS, 2*time.Second)
	for _, n := range lab.nodes {
		lab.startSpeaker(n.Name)
	}
	lab.coldStart(harness)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := pollVIP(ctx, lab.httpsIn(lab.client.NS, 250*time.Millisecond), cpVIP)
	waitFor(t, "the client's first answer through the VIP", time.Minute, func() bool { return client.answeredSince(time.Time{}) })

	holder := lab.failover(client, "SIGKILL of the holder's kube-apiserver", func(h string) {
		lab.signal("apiserver-"+h, syscall.SIGKILL)
	})
	lab.startAPIServer(holder)
	lab.waitEligible(harness, holder)

	holder = lab.failover(client, "SIGTERM of the holder's speaker (planned)", func(h string) {
		lab.signal("speaker-"+h, syscall.SIGTERM)
	})
	lab.startSpeaker(holder)
	lab.waitEligible(harness, holder)

	holder = lab.failover(client, "SIGSTOP of the holder's kube-apiserver (/readyz times out)", func(h string) {
		lab.signal("apiserver-"+h, syscall.SIGSTOP)
	})
	lab.signal("apiserver-"+holder, syscall.SIGCONT)
	lab.waitEligible(harness, holder)

	// The cut node may keep the VIP on its lo while it is cut off (no one reaches it there);
	// once its link is back, one of the two lets it go (docs/control-plane.md says which).
	holder = lab.failover(client, "the holder's link cut", func(h string) {
		lab.setLink(h, "down")
	})
	t.Logf("the holder's link cut: while it is cut, the VIP is on the lo of %v", lab.holders())
	lab.healed(client, "the holder's link cut: its link back", func() { lab.setLink(holder, "up") })
	lab.waitEligible(harness, holder)

	// The frozen speaker keeps the VIP on its lo and says nothing: the others see it dead.
	holder = lab.failover(client, "SIGSTOP of the holder's speaker", func(h string) {
		lab.signal("speaker-"+h, syscall.SIGSTOP)
	})
	lab.healed(client, "SIGSTOP of the holder's speaker: SIGCONT", func() { lab.signal("speaker-"+holder, syscall.SIGCONT) })

	// The speaker killed leaves the VIP on its node's lo: its kernel must not answer for it.
	lab.failover(client, "SIGKILL of the holder's speaker", func(h string) {
		lab.signal("speaker-"+h, syscall.SIGKILL)
	})
}

// coldStart starts one apiserver, waits for the VIP to come to its node, then starts the other
// two: the VIP stays where it is.
func (lab *cpLab) coldStart(harness *http.Client) {
	t := lab.t
	waitFor(t, "every speaker started", time.Minute, func() bool {
		return !slices.ContainsFunc(lab.nodes, func(n labNode) bool {
			return !strings.Contains(lab.log("speaker-"+n.Name), `"starting"`)
		})
	})
	if h := lab.holders(); len(h) > 0 {
		t.Fatalf("no apiserver runs yet, but %v hold the VIP", h)
	}
	first := lab.nodes[1].Name
	start := time.Now()
	lab.startAPIServer(first)
	waitFor(t, "the VIP answers /readyz", 3*time.Minute, func() bool { return ready(harness, cpVIP) })
	t.Logf("cold start: the VIP answered %v after %s's kube-apiserver was started", time.Since(start).Round(time.Millisecond), first)
	lab.waitSettled(first, time.Minute)
	for _, n := range lab.nodes {
		if n.Name != first {
			lab.startAPIServer(n.Name)
		}
	}
	for _, n := range lab.nodes {
		if n.Name != first {
			lab.waitEligible(harness, n.Name)
		}
	}
	lab.waitSettled(first, time.Minute) // sticky: the others' readiness takes nothing from it
}

// waitEligible waits for node's apiserver to answer and for its speaker's last word on it to
// be that it is eligible.
func (lab *cpLab) waitEligible(harness *http.Client, node string) {
	waitFor(lab.t, node+"'s apiserver ready", 3*time.Minute, func() bool { return ready(harness, lab.node(node).IPv4.Addr()) })
	waitFor(lab.t, node+"'s speaker eligible", time.Minute, func() bool {
		log := lab.log("speaker-" + node)
		last := strings.LastIndex(log, `"msg":"apiserver readiness changed"`)
		return last >= 0 && strings.HasPrefix(log[last:], `"msg":"apiserver readiness changed","node":"`+node+`","state":"eligible"}`)
	})
}

// waitSettled waits until the VIP is on node's lo and node alone answers ARP for it (a node
// cut off may keep it on its lo meanwhile).
func (lab *cpLab) waitSettled(node string, within time.Duration) {
	lab.waitVIP(within, "want "+node+" alone", func(holders, answerers []string) bool {
		return slices.Contains(holders, node) && slices.Equal(answerers, []string{node})
	})
}

// waitOneHolder waits until the VIP is on one node's lo and that node alone answers ARP for
// it, and returns that node.
func (lab *cpLab) waitOneHolder(within time.Duration) string {
	holders := lab.waitVIP(within, "want one node alone", func(holders, answerers []string) bool {
		return len(holders) == 1 && slices.Equal(answerers, holders)
	})
	return holders[0]
}

// waitVIP waits until ok holds of the nodes with the VIP on their lo and those answering ARP
// for it, and returns the holders; after within, it fails the test saying want.
func (lab *cpLab) waitVIP(within time.Duration, want string, ok func(holders, answerers []string) bool) []string {
	lab.t.Helper()
	deadline := time.Now().Add(within)
	for {
		holders, answerers := lab.holders(), lab.answerers()
		if ok(holders, answerers) {
			return holders
		}
		if time.Now().After(deadline) {
			lab.t.Fatalf("after %v, the VIP is on the lo of %v and answered over ARP by %v; %s", within, holders, answerers, want)
		}
	}
}

// setLink sets node's link to the LAN (its bridge port) up or down.
func (lab *cpLab) setLink(node, state string) {
	run(lab.t, "ip", "-n", lab.switchNS, "link", "set", lab.node(node).Port, state)
}

// healed undoes a fault, waits until one node alone holds and answers the VIP, and logs which
// and the client's longest failed interval meanwhile (the VIP may move once more).
func (lab *cpLab) healed(client *vipPoller, what string, undo func()) {
	start := time.Now()
	undo()
	node := lab.waitOneHolder(time.Minute)
	o := client.outageBetween(start, time.Now())
	lab.t.Logf("%s: the VIP is then held by %s alone; the client's longest failed interval %v, longest time between two answers %v (%d of %d polls failed); load average %s",
		what, node, o.longest.Round(time.Millisecond), o.between.Round(time.Millisecond), o.failures, o.polls, loadAverage(lab.t))
}

// failover does act to the VIP's holder, waits for the VIP to be held, answered and served by
// another node, and logs the client's longest failed interval. It returns the former holder.
func (lab *cpLab) failover(client *vipPoller, what string, act func(holder string)) string {
	t := lab.t
	h := lab.holders()
	if len(h) != 1 {
		t.Fatalf("%s: want one holder of the VIP before, have %v", what, h)
	}
	holder := h[0]
	start := time.Now()
	act(holder)
	var next string
	waitFor(t, what+": another node holds the VIP", time.Minute, func() bool {
		for _, h := range lab.holders() {
			if h != holder {
				next = h
			}
		}
		return next != ""
	})
	moved := time.Now()
	waitFor(t, what+": the client is answered again", time.Minute, func() bool { return client.answeredSince(moved) })
	lab.waitSettled(next, time.Minute)
	o := client.outageBetween(start, time.Now())
	t.Logf("%s: the VIP moved from %s to %s; the client's longest failed interval %v, longest time between two answers %v (%d of %d polls failed, %d of them unanswered in 250 ms; the first: %q); load average %s",
		what, holder, next, o.longest.Round(time.Millisecond), o.between.Round(time.Millisecond), o.failures, o.polls, o.timeouts, o.first, loadAverage(lab.t))
	return holder
}
