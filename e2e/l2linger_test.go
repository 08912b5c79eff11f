package e2e

import (
	"net/netip"
	"os/exec"
	"strings"
	"syscall"
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

// TestL2HandoffTakenBackDuringTheLinger: the address moves to next and back to the owner, and
// while next's hand-off lingers (its pick-up over by then: a short grace here) it moves to next
// again. That is a new move: next must pick up the connections opened through the owner for a
// new grace. Counting its lingering entry as the same hand-off, it picked nothing up, and the
// service proxy reset every connection (seen on the kubelet cluster once drains had moved the
// address back and forth for ten minutes).
func TestL2HandoffTakenBackDuringTheLinger(t *testing.T) {
	inHandoffLab(t, func(t *testing.T, e *l2Env, pod labPod) {
		stop, err := netlab.ServeEcho(pod.NS, echoPort)
		must(t, err)
		t.Cleanup(func() { _ = stop() })
		e.extraArgs = []string{"--l2-handoff-grace=5s", "--l2-handoff-linger=10m"}
		for _, n := range []string{"node-a", "node-b", "node-c"} {
			e.kill(n, syscall.SIGTERM)
			e.startSpeaker(n)
		}
		ip := handoffVIP
		e.create(scenario{name: "handoff-retaken", ip: ip})
		owner, next := ownerAndNext(ip)
		e.expectOwner(ip, owner)
		moveTo := func(from, to string) {
			cordoned(true)(e, from)
			e.expectOwner(ip, to) // its status too: the latest claim, that the uncordon keeps
			cordoned(false)(e, from)
			e.expectOwner(ip, to) // takes nothing back: placement is sticky
		}
		moveTo(owner, next)
		listsHandoff(t, e, next, ip, owner)
		moveTo(next, owner)
		waitFor(t, next+"'s pick-up of "+ip.String()+" expires (its grace)", 20*time.Second, func() bool {
			out, err := exec.Command("ip", "netns", "exec", e.node(next).NS, "nft", "list", "map", "inet", "portico-handoff", "previous4").Output()
			return err == nil && !strings.Contains(string(out), ip.String())
		})
		s := openStreams(t, e.Client.NS, netip.AddrPortFrom(ip, echoPort), 20)
		defer s.stop()
		s.after(t, "50 echoes per connection through "+owner)
		flowsBefore, _ := handedOff(t, e, next)
		moveTo(owner, next)
		sent, resets, errs, worst := s.after(t, "50 echoes per connection through "+next+", taken back during its linger")
		flows, _ := handedOff(t, e, next)
		t.Logf("to %s again during its linger: %d echoes, %d resets, %d broken connections, longest echo %v; %.0f flows handed off",
			next, sent, resets, len(errs), worst.Round(time.Millisecond), flows-flowsBefore)
		if len(errs) > 0 {
			t.Fatalf("%d of 20 connections broke when the address moved to %s again during its linger: %v", len(errs), next, errs)
		}
		if flows-flowsBefore != 20 {
			t.Errorf("%s handed off %.0f flows when the address moved to it again during its linger, want the 20 connections", next, flows-flowsBefore)
		}
	})
}
