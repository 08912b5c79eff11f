//go:build chaos

package e2e

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/packet"

	"github.com/portico-lb/portico/internal/netlab"
)

// TestChaosSpeakers: speakers SIGKILLed and SIGTERMed and started again, round after round,
// then one node cut off (its bridge port down) and healed. An outage monitor asks for every
// address all along; at the end each address is answered by exactly its owner. Then a flood
// of ARP requests from the client: the owner keeps answering, with bounded memory. (BGP is not
// part of it: TestBGP restarts the routers and kills speakers.)
func TestChaosSpeakers(t *testing.T) {
	inLab(t, func(t *testing.T, e *l2Env) {
		rounds := max(2, chaosServices(t)/300)
		all := []string{"node-a", "node-b", "node-c"}
		var ips []netip.Addr
		for i := range 4 {
			ip := netip.MustParseAddr(fmt.Sprintf("198.51.100.%d", 200+i))
			e.create(scenario{name: fmt.Sprintf("chaos-%d", i), ip: ip})
			ips = append(ips, ip)
		}
		// Every address answered by one of nodes alone: after the first failover not the
		// hash's choice any more, since an address stays with the node that took it.
		settleAll := func(nodes []string) {
			for _, ip := range ips {
				waitFor(t, "one of "+strings.Join(nodes, ",")+" alone answers "+ip.String(), 20*time.Second, func() bool {
					macs := e.arpingMACs(ip, 1)
					return len(macs) == 1 && slices.Contains(nodes, e.nodeByMAC(macs[0]))
				})
			}
		}
		settleAll(all)
		mon := e.monitorOutages(ips)
		rng := rand.New(rand.NewPCG(uint64(rounds), 3))
		kills := 0
		for r := range rounds {
			victim := all[rng.IntN(len(all))]
			sig := []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM}[r%2]
			e.kill(victim, sig)
			kills++
			settleAll(slices.DeleteFunc(slices.Clone(all), func(n string) bool { return n == victim }))
			e.startSpeaker(victim)
			settleAll(all)
		}
		cut := all[rng.IntN(len(all))]
		run(t, "ip", "-n", e.Switch, "link", "set", e.node(cut).Port, "down")
		settleAll(slices.DeleteFunc(slices.Clone(all), func(n string) bool { return n == cut }))
		run(t, "ip", "-n", e.Switch, "link", "set", e.node(cut).Port, "up")
		settleAll(all)
		longest, worst := mon.finish()
		for _, ip := range ips {
			owner := e.soleAnnouncer(ip, 20*time.Second)
			if macs := e.arpingMACs(ip, 3); !slices.Equal(macs, []string{e.macOf(owner)}) {
				t.Errorf("after the storm %s is answered by %v, want only %s, which reports it", ip, macs, owner)
			}
		}
		report(t, "%d speaker kills (SIGKILL and SIGTERM alternately), 1 partition of %s healed; after settling each of %d addresses is answered by exactly one node; longest outage %s (%s)",
			kills, cut, len(ips), longest.Round(time.Millisecond), worst)

		e.arpFlood(t, ips)
	})
}

// arpFlood sends 10k ARP requests a second for 10 s from the client namespace (half for the
// owned addresses, half for addresses nobody owns) from a MAC and address of its own, while a
// prober asks for the owned addresses; it reports the prober's success rate and the owners'
// memory before, during and after.
func (e *l2Env) arpFlood(t *testing.T, ips []netip.Addr) {
	const rate, seconds = 10000, 10
	owners := map[string]bool{}
	owner := map[netip.Addr]string{}
	for _, ip := range ips {
		owner[ip] = e.soleAnnouncer(ip, 20*time.Second) // where the storm left it
		owners[owner[ip]] = true
	}
	rss := func() int {
		total := 0
		for n := range owners {
			total += e.rssOf(n)
		}
		return total
	}
	before := rss()
	var conn *packet.Conn
	must(t, netlab.In(e.Client.NS, func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		conn, err = packet.Listen(ifi, packet.Raw, int(ethernet.EtherTypeARP), nil)
		return err
	}))
	defer conn.Close()
	floodMAC := net.HardwareAddr{0x02, 0, 0, 0, 0, 0xfe}
	frame := func(target netip.Addr) []byte {
		req, _ := arp.NewPacket(arp.OperationRequest, floodMAC, netip.MustParseAddr("198.51.100.254"), ethernet.Broadcast, target)
		pb, _ := req.MarshalBinary()
		fb, _ := (&ethernet.Frame{Destination: ethernet.Broadcast, Source: floodMAC, EtherType: ethernet.EtherTypeARP, Payload: pb}).MarshalBinary()
		return fb
	}
	done := make(chan int)
	go func() {
		sent := 0
		// Paced to the rate: one batch per 10 ms tick.
		pace := time.NewTicker(10 * time.Millisecond)
		defer pace.Stop()
		for tick := 0; tick < seconds*100; tick++ {
			<-pace.C
			for i := range rate / 100 {
				target := ips[i%len(ips)]
				if i%2 == 1 {
					target = netip.AddrFrom4([4]byte{198, 51, 100, byte(100 + i%100)})
				}
				if _, err := conn.WriteTo(frame(target), &packet.Addr{HardwareAddr: ethernet.Broadcast}); err == nil {
					sent++
				}
			}
		}
		done <- sent
	}()
	prober := e.arpProber()
	defer prober.close()
	asked, answered, peak := 0, 0, before
	var sent int
	for flooding := true; flooding; {
		select {
		case sent = <-done:
			flooding = false
			continue
		default:
		}
		for _, ip := range ips {
			asked++
			if len(prober.ask(ip, 100*time.Millisecond)) > 0 {
				answered++
			}
		}
		peak = max(peak, rss())
	}
	after := rss()
	success := float64(answered) / float64(max(asked, 1))
	report(t, "ARP flood: %d requests in %d s (%d/s asked) from the client; owned addresses answered %d of %d probes (%.1f%%); owners' RSS %s before, %s peak, %s after",
		sent, seconds, rate, answered, asked, 100*success, mib(before), mib(peak), mib(after))
	if success < 0.5 {
		t.Errorf("under the flood only %.1f%% of probes for owned addresses were answered", 100*success)
	}
	if after > before+50*1024 {
		t.Errorf("the owners' memory grew from %s to %s under the flood", mib(before), mib(after))
	}
	for _, ip := range ips {
		waitFor(t, owner[ip]+" alone answers "+ip.String()+" after the flood", 20*time.Second, func() bool { return e.answeredOnlyBy(ip, owner[ip]) })
	}
}
