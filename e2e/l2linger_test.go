package e2e

import (
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/portico-lb/portico/internal/netlab"
)

// TestL2HandoffOutlivesTheMoveBack: connections opened through the owner are handed off by
// the node that took the address over; when the address moves back to the owner, a client
// that has not yet learnt the owner's MAC again (one that ignores gratuitous ARP until its next
// neighbour probe: pinned here) still sends to the taker, which must go on passing its flows to
// the owner for --l2-handoff-linger (5 s in the lab), and only then end the hand-off. Ended at once, those
// packets met no state on the taker, the service proxy took them up afresh and the pod reset
// them.
func TestL2HandoffOutlivesTheMoveBack(t *testing.T) {
	inHandoffLab(t, func(t *testing.T, e *l2Env, pod labPod) {
		stop, err := netlab.ServeEcho(pod.NS, echoPort)
		must(t, err)
		t.Cleanup(func() { _ = stop() })
		ip := handoffVIP
		e.create(scenario{name: "handoff-linger", ip: ip})
		owner, next := ownerAndNext(ip)
		e.expectOwner(ip, owner)
		s := openStreams(t, e.Client.NS, netip.AddrPortFrom(ip, echoPort), 20)
		defer s.stop()
		s.after(t, "50 echoes per connection through "+owner)

		cordoned(true)(e, owner)
		t.Cleanup(func() { cordoned(false)(e, owner) })
		waitFor(t, "client's entry moves to "+next, 20*time.Second, func() bool {
			return netlab.Neighbour(e.Client.NS, ip) == e.macOf(next)
		})
		if _, _, errs, _ := s.after(t, "50 echoes per connection through "+next); len(errs) > 0 {
			t.Fatalf("%d of 20 connections broke when the address moved to %s: %v", len(errs), next, errs)
		}
		listsHandoff(t, e, next, ip, owner)
		cordoned(false)(e, owner) // takes nothing back: placement is sticky

		// The client keeps next's MAC whatever it hears.
		run(t, "ip", "-n", e.Client.NS, "neigh", "replace", ip.String(), "lladdr", e.macOf(next), "dev", "eth0", "nud", "permanent")
		t.Cleanup(func() { _ = exec.Command("ip", "-n", e.Client.NS, "neigh", "del", ip.String(), "dev", "eth0").Run() })
		cordoned(true)(e, next) // back to owner, the hash's choice among the others
		t.Cleanup(func() { cordoned(false)(e, next) })
		waitFor(t, owner+" alone reports "+ip.String(), 20*time.Second, func() bool {
			return strings.Join(e.announcers(ip), ",") == owner
		})
		sent, resets, errs, worst := s.after(t, "50 echoes per connection still through "+next+" after the move back")
		t.Logf("back to %s, the client still on %s: %d echoes, %d resets, %d broken connections, longest echo %v",
			owner, next, sent, resets, len(errs), worst.Round(time.Millisecond))
		if len(errs) > 0 {
			t.Fatalf("%d of 20 connections broke when the address moved back to %s while the client still sent to %s: %v", len(errs), owner, next, errs)
		}
		waitFor(t, next+" ends the hand-off of "+ip.String()+" once the linger is over", 30*time.Second, func() bool {
			out, err := exec.Command("ip", "-n", e.node(next).NS, "route", "show", "table", "3580").Output()
			return err == nil && !strings.Contains(string(out), ip.String()+" ")
		})
	})
}
