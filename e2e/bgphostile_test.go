package e2e

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/internal/netlab"
)

// floodRoutes is how many routes the router sends the speakers in TestBGPHostileRouter: a few
// thousand, enough that storing them would show in a speaker's memory.
const floodRoutes = 5000

// TestBGPHostileRouter feeds the speakers what a router must not be able to hurt them with: a large
// table (r1, bird), which the import policy rejects, and malformed UPDATEs from a hand-written
// peer (r2), after which the speaker still runs, keeps its other session and answers ARP.
func TestBGPHostileRouter(t *testing.T) {
	inBGPLab(t, 2, func(t *testing.T, e *l2Env) {
		tor := e.Routers[0]
		b := startBird(t, tor.NS, floodBirdConfig(tor.IPv4.Addr(), e.Nodes, floodRoutes))
		e.createObject(bgpPeer("tor", tor.IPv4.Addr(), clusterASN, routerASN))
		e.waitEstablished("tor", 30*time.Second, "node-a", "node-b", "node-c")

		t.Run("a router's full table is rejected and costs no RIB", func(t *testing.T) {
			e.t = t
			metrics := e.node("node-a").IPv4.Addr().String() + ":7474"
			before := e.rssOf("node-a")
			_, err := b.Birdc("enable", "flood")
			must(t, err)
			var received, accepted float64
			waitFor(t, fmt.Sprintf("node-a received the %d routes", floodRoutes), 60*time.Second, func() bool {
				m, err := scrapeMetrics(context.Background(), metrics)
				if err != nil {
					return false
				}
				received = sum(m, "portico_bgp_prefixes_received", map[string]string{"peer": "tor"})
				accepted = sum(m, "portico_bgp_prefixes_accepted", map[string]string{"peer": "tor"})
				return received == floodRoutes
			})
			after := e.rssOf("node-a")
			t.Logf("node-a: %v routes received, %v accepted; RSS %d KiB before, %d KiB after (%+d KiB, %.0f B a route)",
				received, accepted, before, after, after-before, float64(after-before)*1024/floodRoutes)
			if accepted != 0 {
				t.Fatalf("%v of the router's routes reached the RIB; the import policy rejects them all", accepted)
			}
		})

		t.Run("malformed UPDATEs reset only their own session", func(t *testing.T) {
			e.t = t
			l2ip := netip.MustParseAddr("198.51.100.120")
			e.create(scenario{name: "hostile-l2", ip: l2ip})
			owner := e.soleAnnouncer(l2ip, 10*time.Second)
			e.expectARP(l2ip, owner)
			torBefore := e.sessions("node-a")["tor"]

			hostile := e.Routers[1]
			peer := listenBGP(t, hostile.NS, hostile.IPv4.Addr())
			bp := bgpPeer("hostile", hostile.IPv4.Addr(), clusterASN, hostileASN)
			bp.Spec.NodeSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"kubernetes.io/hostname": "node-a"}}}
			e.createObject(bp)
			for _, m := range malformedUpdates(hostile.IPv4.Addr()) {
				conn := peer.accept(t, 30*time.Second)
				establish(t, conn, hostile.IPv4.Addr())
				_, err := conn.Write(bgpMessage(bgpUpdate, m.body))
				must(t, err)
				got := awaitNotification(conn)
				conn.Close()
				t.Logf("%s: %s", m.name, got)
				if m.mustReset && !strings.HasPrefix(got, "NOTIFICATION 3/") {
					t.Fatalf("%s: the speaker answered %s, want a NOTIFICATION UPDATE Message Error", m.name, got)
				}
			}
			// The speaker survived them all: the same process redials the peer, its other
			// session never moved, and it still answers ARP for its address.
			establish(t, peer.accept(t, 30*time.Second), hostile.IPv4.Addr())
			if exited(e.speakers["node-a"]) {
				t.Fatal("node-a's speaker exited")
			}
			if after := e.sessions("node-a")["tor"]; after.State != "Established" || !after.Since.Equal(torBefore.Since) {
				t.Fatalf("the tor session moved: before %+v, after %+v", torBefore, after)
			}
			e.expectARP(l2ip, owner)
		})
	})
}

// hostileASN is the AS of the hand-written peer.
const hostileASN = 64530

// floodBirdConfig is birdConfig with a static protocol "flood" of n IPv6 /48 routes in
// 2001:db8::/32, exported to the nodes once enabled (it starts disabled).
func floodBirdConfig(local netip.Addr, nodes []labNode, n int) string {
	cfg := birdConfig(local, nodes, clusterASN, "")
	cfg = strings.Replace(cfg, "ipv6 { import all; export none; };",
		"ipv6 { import all; export where proto = \"flood\"; next hop address 2001:db8:1::3; };", 1)
	var b strings.Builder
	b.WriteString(strings.Replace(cfg, "protocol kernel { ipv6 { import none; export all; }; merge paths on; }",
		"protocol kernel { ipv6 { import none; export where proto != \"flood\"; }; merge paths on; }", 1))
	b.WriteString("protocol static flood { ipv6; disabled;\n")
	for i := range n {
		fmt.Fprintf(&b, "  route 2001:db8:%x:%x::/64 blackhole;\n", 0x8000+i>>16, i&0xffff)
	}
	b.WriteString("}\n")
	return b.String()
}

// expectARP waits until the client's ARP requests for ip are answered by node alone.
func (e *l2Env) expectARP(ip netip.Addr, node string) {
	e.t.Helper()
	waitFor(e.t, ip.String()+" answered by "+node, 10*time.Second, func() bool {
		return slices.Equal(e.arpingMACs(ip, 1), []string{e.macOf(node)})
	})
}

func exited(p *labProc) bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// malformedUpdate is the body of an UPDATE a broken or hostile router might send.
type malformedUpdate struct {
	name      string
	body      []byte
	mustReset bool // RFC 4271 and 7606 leave no choice but a session reset
}

// malformedUpdates are the UPDATEs of the GoBGP advisories the move to v4 closed, each of which
// panicked older versions (this peer sends no 4-octet-AS capability, so AS4_PATH is read):
// CVE-2026-42285 (attribute lengths that disagree), CVE-2026-41643 (an AS4_PATH before the
// AS_PATH, one byte long), CVE-2026-41642 (an unknown well-known attribute), CVE-2026-30405 (a
// NEXT_HOP shorter than 4 bytes).
func malformedUpdates(self netip.Addr) []malformedUpdate {
	origin := []byte{0x40, 1, 1, 0}                                        // IGP
	asPath := []byte{0x40, 2, 4, 2, 1, hostileASN >> 8, hostileASN & 0xff} // AS_SEQUENCE of one AS
	nextHop := append([]byte{0x40, 3, 4}, self.AsSlice()...)
	update := func(nlri []byte, attrs ...[]byte) []byte {
		all := slices.Concat(attrs...)
		return slices.Concat([]byte{0, 0}, binary.BigEndian.AppendUint16(nil, uint16(len(all))), all, nlri)
	}
	nlri := []byte{32, 203, 0, 113, 250}
	return []malformedUpdate{
		{name: "CVE-2026-42285: an attribute longer than the attribute list",
			body: update(nil, []byte{0x40, 1, 5, 0})},
		{name: "CVE-2026-41643: a one-byte AS4_PATH before the AS_PATH",
			body: update(nil, []byte{0x40, 17, 1, 2}, []byte{0x40, 2, 4, 0xff, 0xff, 0xde, 0xad})},
		{name: "CVE-2026-41642: an unknown well-known attribute", mustReset: true,
			body: update(nlri, origin, asPath, nextHop, []byte{0x40, 200, 1, 0})},
		{name: "CVE-2026-30405: a NEXT_HOP of 3 bytes",
			body: update(nlri, origin, asPath, []byte{0x40, 3, 3, 198, 51, 100})},
	}
}

// BGP message types.
const (
	bgpOpen         = 1
	bgpUpdate       = 2
	bgpNotification = 3
	bgpKeepalive    = 4
)

// bgpPeerListener is the hand-written peer's listening socket, on port 179 in its namespace.
type bgpPeerListener struct{ ln *net.TCPListener }

func listenBGP(t *testing.T, ns string, addr netip.Addr) *bgpPeerListener {
	var ln *net.TCPListener
	must(t, netlab.In(ns, func() (err error) {
		ln, err = net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(addr, 179)))
		return err
	}))
	t.Cleanup(func() { ln.Close() })
	return &bgpPeerListener{ln}
}

// accept waits for the speaker's next connection.
func (l *bgpPeerListener) accept(t *testing.T, within time.Duration) net.Conn {
	t.Helper()
	must(t, l.ln.SetDeadline(time.Now().Add(within)))
	conn, err := l.ln.Accept()
	if err != nil {
		t.Fatalf("the speaker did not connect to the peer: %v", err)
	}
	return conn
}

// establish reads the speaker's OPEN, answers with an OPEN (AS hostileASN, no capabilities)
// and a KEEPALIVE, and waits for the speaker's KEEPALIVE: the session is Established.
func establish(t *testing.T, conn net.Conn, id netip.Addr) {
	t.Helper()
	must(t, conn.SetDeadline(time.Now().Add(30*time.Second)))
	if typ, _, err := readBGPMessage(conn); err != nil || typ != bgpOpen {
		t.Fatalf("want the speaker's OPEN, got type %d, %v", typ, err)
	}
	open := slices.Concat([]byte{4, hostileASN >> 8, hostileASN & 0xff, 0, 90}, id.AsSlice(), []byte{0})
	_, err := conn.Write(slices.Concat(bgpMessage(bgpOpen, open), bgpMessage(bgpKeepalive, nil)))
	must(t, err)
	for {
		typ, body, err := readBGPMessage(conn)
		if err != nil || typ == bgpNotification {
			t.Fatalf("the session did not come up: type %d %v, %v", typ, body, err)
		}
		if typ == bgpKeepalive {
			return
		}
	}
}

// awaitNotification reads what the speaker sends after the malformed UPDATE until it closes
// the session: "NOTIFICATION code/subcode", or how the connection ended without one (a
// speaker that treats the UPDATE as a withdrawal keeps the session; the hold timer, 9 s in
// the lab, then ends the wait, since this peer sends no more KEEPALIVEs).
func awaitNotification(conn net.Conn) string {
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	for {
		typ, body, err := readBGPMessage(conn)
		switch {
		case err != nil:
			return "no NOTIFICATION: " + err.Error()
		case typ == bgpNotification && len(body) >= 2 && body[0] == 4:
			return "session kept (treated as withdrawn), then NOTIFICATION 4 (hold timer expired)"
		case typ == bgpNotification && len(body) >= 2:
			return fmt.Sprintf("NOTIFICATION %d/%d", body[0], body[1])
		}
	}
}

func bgpMessage(typ byte, body []byte) []byte {
	m := slices.Repeat([]byte{0xff}, 16)
	m = binary.BigEndian.AppendUint16(m, uint16(19+len(body)))
	return append(append(m, typ), body...)
}

func readBGPMessage(r io.Reader) (typ byte, body []byte, err error) {
	var hdr [19]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := int(binary.BigEndian.Uint16(hdr[16:18]))
	if n < 19 {
		return 0, nil, errors.New("message shorter than its header")
	}
	body = make([]byte, n-19)
	_, err = io.ReadFull(r, body)
	return hdr[18], body, err
}
