package e2e

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// gossipPort is where the lab's speakers gossip (--memberlist-bind-port's default).
const gossipPort = 7946

// heartbeatMagic is a direct heartbeat's first byte (speaker/membership/heartbeat.go).
const heartbeatMagic = 0xb7

// heartbeatsTo records the direct heartbeats from one node to another (in the receiver's
// namespace, as a host on the path could).
func (e *l2Env) heartbeatsTo(to, from string) *packetRecorder {
	match := udpTo(e.node(from).IPv4.Addr(), gossipPort)
	return recordPackets(e.t, e.node(to).NS, func(ip []byte) ([]byte, bool) {
		payload, ok := match(ip)
		return payload, ok && len(payload) > 0 && payload[0] == heartbeatMagic
	})
}

// memberSeen reports whether node's speaker logged member's liveness as alive, in its log
// from offset on.
func (e *l2Env) memberSeen(node string, offset int, member string, alive bool) bool {
	for _, line := range strings.Split(e.speakerLog(node)[offset:], "\n") {
		var l struct {
			Msg, Member string
			Alive       bool
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "membership changed" && l.Member == member && l.Alive == alive {
			return true
		}
	}
	return false
}

// TestHeartbeatsRecordedBeforeARestart: with a gossip key, a host on the path records node-b's
// heartbeats to node-a. node-a restarts while it cannot hear node-b's heartbeats (a filter in
// its namespace drops them), so it knows none of node-b's numbers; then node-b's speaker is
// killed and the host sends node-a the recorded heartbeats from node-b's address, at their
// own pace. node-a finds node-b dead while they still arrive (they name node-a's life before
// the restart, and it refuses them: portico_memberlist_heartbeats_refused_total
// {reason="receiver-restarted"}). Before, node-a took them as node-b's, numbered past anything
// it knew, and held node-b alive for as long as they came.
func TestHeartbeatsRecordedBeforeARestart(t *testing.T) {
	inLab(t, func(t *testing.T, e *l2Env) {
		ctx := context.Background()
		must(t, e.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "portico-system"}}))
		must(t, e.c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "portico-system", Name: "portico-memberlist"},
			Data: map[string][]byte{"secretkey": []byte("0123456789abcdef0123456789abcdef")}}))
		e.restartSpeakers([]string{"--memberlist-secret=portico-system/portico-memberlist"})
		a, b := e.node("node-a"), e.node("node-b")

		rec := e.heartbeatsTo("node-a", "node-b")
		const want = 160 // some 8 s of them: node-b sends each watcher 20 a second
		waitFor(t, fmt.Sprintf("%d of node-b's heartbeats to node-a recorded", want), 30*time.Second, func() bool { return len(rec.packets()) >= want })
		rec.stop()
		recorded := rec.packets()

		block := fmt.Sprintf("add table inet hbblock; add chain inet hbblock in { type filter hook input priority -10; }; add rule inet hbblock in ip saddr %s udp dport %d @th,64,8 %#x drop",
			b.IPv4.Addr(), gossipPort, heartbeatMagic)
		run(t, "ip", "netns", "exec", a.NS, "nft", block)
		e.kill("node-a", syscall.SIGKILL)
		offset := len(e.speakerLog("node-a"))
		e.startSpeaker("node-a")
		waitFor(t, "the restarted node-a counts node-b alive", 30*time.Second, func() bool { return e.memberSeen("node-a", offset, "node-b", true) })

		e.kill("node-b", syscall.SIGKILL)
		run(t, "ip", "netns", "exec", a.NS, "nft", "delete table inet hbblock")
		replayed := make(chan time.Time, 1)
		go func() {
			start := time.Now()
			for _, r := range recorded { // at the pace they were recorded at: the replay, not a wait
				<-time.After(time.Until(start.Add(r.at.Sub(recorded[0].at))))
				_ = sendSpoofedUDP(e.Client.NS, netip.AddrPortFrom(b.IPv4.Addr(), gossipPort), netip.AddrPortFrom(a.IPv4.Addr(), gossipPort), r.payload)
			}
			replayed <- time.Now()
		}()
		killed := time.Now()
		length := recorded[len(recorded)-1].at.Sub(recorded[0].at)
		found := waitFor(t, "node-a finds node-b dead", length+10*time.Second, func() bool { return e.memberSeen("node-a", offset, "node-b", false) })
		select {
		case end := <-replayed:
			t.Fatalf("node-a found node-b dead %v after the kill, only once the replay of %d heartbeats over %v had ended (%v after the kill): it took them as node-b's",
				found.Round(time.Millisecond), len(recorded), length.Round(time.Millisecond), end.Sub(killed).Round(time.Millisecond))
		default:
		}
		refused := `portico_memberlist_heartbeats_refused_total{reason="receiver-restarted"}`
		waitFor(t, "node-a counts the replayed heartbeats refused", length+10*time.Second, func() bool { return e.metric("node-a", refused) >= float64(len(recorded)) })
		t.Logf("node-a found node-b dead %v after the kill while %d heartbeats recorded before its restart (over %v) were sent to it again; it refused them all (%s)",
			found.Round(time.Millisecond), len(recorded), length.Round(time.Millisecond), refused)
	})
}

// TestForgedHeartbeatNumber: without a gossip key, a host on the LAN takes one of node-b's
// heartbeats to node-a, sets its number to the highest there is, and sends it to node-a from
// node-b's address. node-a goes on taking node-b's own heartbeats: it never finds node-b silent,
// so it does not ask node-b's kernel (a TCP connection to its gossip port, seen in node-b's
// namespace) in the three seconds after. Before, node-a refused every later heartbeat of
// node-b's as numbered below the forged one and asked node-b's kernel again and again.
func TestForgedHeartbeatNumber(t *testing.T) {
	inLab(t, func(t *testing.T, e *l2Env) {
		a, b := e.node("node-a"), e.node("node-b")
		rec := e.heartbeatsTo("node-a", "node-b")
		waitFor(t, "one of node-b's heartbeats to node-a recorded", 30*time.Second, func() bool { return len(rec.packets()) > 0 })
		rec.stop()
		forged := rec.packets()[0].payload
		if len(forged) < 9 {
			t.Fatalf("node-b's heartbeat is %d bytes", len(forged))
		}
		binary.BigEndian.PutUint64(forged[1:], ^uint64(0)) // in clear: the magic byte, then the number

		asks := recordPackets(t, b.NS, func(ip []byte) ([]byte, bool) {
			proto, from, l4, ok := ipv4Header(ip)
			syn := ok && proto == syscall.IPPROTO_TCP && from == a.IPv4.Addr() && binary.BigEndian.Uint16(l4[2:]) == gossipPort &&
				len(l4) >= 14 && l4[13]&0x12 == 0x02 // SYN without ACK
			return nil, syn
		})
		before := len(asks.packets())
		must(t, sendSpoofedUDP(e.Client.NS, netip.AddrPortFrom(b.IPv4.Addr(), gossipPort), netip.AddrPortFrom(a.IPv4.Addr(), gossipPort), forged))
		<-time.After(3 * time.Second) // the window watched: there is nothing to wait for
		// memberlist's own push-pull may open one connection in that time.
		if n := len(asks.packets()) - before; n > 1 {
			t.Fatalf("node-a asked node-b's kernel %d times in the 3 s after a heartbeat of node-b's numbered 2^64-1 was forged: it refused node-b's own heartbeats", n)
		}
	})
}
