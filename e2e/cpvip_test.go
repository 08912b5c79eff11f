package e2e

import (
	"context"
	"net/http"
	"os"
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
// speaker stops and when its apiserver stops answering, the VIP moves to another ready node and
// is answered by that node alone. The client's longest failed interval is measured each time
// and logged, never asserted: the test asserts only that the client recovers.
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

// waitSettled waits until the VIP is on node's lo and node alone answers ARP for it.
func (lab *cpLab) waitSettled(node string, within time.Duration) {
	var answerers []string
	lab.t.Helper()
	deadline := time.Now().Add(within)
	for {
		answerers = lab.answerers()
		if slices.Contains(lab.holders(), node) && slices.Equal(answerers, []string{node}) {
			return
		}
		if time.Now().After(deadline) {
			lab.t.Fatalf("after %v, the VIP is on the lo of %v and answered over ARP by %v; want %s alone", within, lab.holders(), answerers, node)
		}
	}
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
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("%s: the VIP moved from %s to %s; the client's longest failed interval %v (%d of %d polls failed, %d of them unanswered in 250 ms; the first: %q); load average %s",
		what, holder, next, o.longest.Round(time.Millisecond), o.failures, o.polls, o.timeouts, o.first, strings.Join(strings.Fields(string(load))[:3], " "))
	return holder
}
