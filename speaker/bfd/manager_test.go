package bfd

import (
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/net/ipv4"

	"github.com/portico-lb/portico/internal/netlab"
)

// transitions records what one side's session reported.
type transitions struct {
	mu   sync.Mutex
	seen []Transition
}

func (r *transitions) add(t Transition) { r.mu.Lock(); r.seen = append(r.seen, t); r.mu.Unlock() }

func (r *transitions) last() Transition {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.seen) == 0 {
		return Transition{To: Down}
	}
	return r.seen[len(r.seen)-1]
}

// TestManagersOverSockets runs two Managers in two namespaces on one bridge, talking RFC 5881
// over real UDP sockets: the sessions come Up, a packet with TTL 64 is dropped, a cut link is
// detected as detection-time-expired, and stopping one side takes the other down as
// neighbor-signaled-down.
func TestManagersOverSockets(t *testing.T) {
	netlab.Require(t, "ip")
	lab := netlab.New(t)
	a := lab.AddHost("a", "02:00:00:00:00:0a", "198.51.100.11/24", "2001:db8:1::11/64")
	b := lab.AddHost("b", "02:00:00:00:00:0b", "198.51.100.12/24", "2001:db8:1::12/64")
	cfg := Config{DesiredMinTx: 100 * time.Millisecond, RequiredMinRx: 100 * time.Millisecond, DetectMult: 3}
	start := func(h netlab.Host, peer netlab.Host) (*Manager, *Peer, *transitions) {
		m, rec := NewManager(testr.New(t)), &transitions{}
		var p *Peer
		if err := netlab.In(h.NS, func() (err error) {
			p, err = m.Start("peer", peer.IPv4.Addr(), h.IPv4.Addr(), cfg, rec.add)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		return m, p, rec
	}
	ma, _, ra := start(a, b)
	_, pb, rb := start(b, a)
	isUp := func(r *transitions) func() bool { return func() bool { return r.last().To == Up } }
	netlab.WaitFor(t, "both sessions Up", 10*time.Second, func() bool { return isUp(ra)() && isUp(rb)() })

	// GTSM: a packet from b with TTL 64 never reaches a's session.
	if err := netlab.In(b.NS, func() error {
		c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(a.IPv4.Addr(), Port)))
		if err != nil {
			return err
		}
		defer c.Close()
		if err := ipv4.NewConn(c).SetTTL(64); err != nil {
			return err
		}
		_, err = c.Write(Packet{State: AdminDown, DetectMult: 3, MyDiscriminator: 99, YourDiscriminator: 1}.Marshal())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	netlab.WaitFor(t, "the TTL 64 packet counted as dropped", 5*time.Second, func() bool {
		return counterValue(ma.metrics.dropped.WithLabelValues("ttl")) == 1
	})
	if got := ra.last(); got.To != Up {
		t.Fatalf("a's session left Up after a TTL 64 packet: %+v", got)
	}

	lab.MustRun("ip", "-n", lab.Switch, "link", "set", b.Port, "down")
	netlab.WaitFor(t, "a's session Down after the link cut", 5*time.Second, func() bool { return ra.last().To == Down })
	if got := ra.last(); got.Diag != DiagDetectionExpired {
		t.Fatalf("a went Down with %v, want detection-time-expired", got.Diag)
	}
	lab.MustRun("ip", "-n", lab.Switch, "link", "set", b.Port, "up")
	netlab.WaitFor(t, "both sessions Up again", 10*time.Second, func() bool { return isUp(ra)() && isUp(rb)() })

	pb.Stop()
	netlab.WaitFor(t, "a's session Down after b stopped", 5*time.Second, func() bool { return ra.last().To == Down })
	if got := ra.last(); got.Diag != DiagNeighborDown {
		t.Fatalf("a went Down with %v, want neighbor-signaled-down", got.Diag)
	}
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	_ = c.Write(&m) // a plain counter always writes
	return m.GetCounter().GetValue()
}

// TestDiscriminatorsAreRandom: local discriminators are non-zero, never one a running session
// holds, and not a sequence an attacker could guess from one it saw.
func TestDiscriminatorsAreRandom(t *testing.T) {
	m := NewManager(testr.New(t))
	seen := map[uint32]bool{}
	var last uint32
	for i := range 1000 {
		d := m.newDiscriminator()
		switch {
		case d == 0:
			t.Fatal("discriminator 0")
		case seen[d]:
			t.Fatalf("discriminator %d handed out twice while in use", d)
		case i > 0 && d == last+1:
			t.Fatalf("discriminator %d follows %d", d, last)
		}
		seen[d], last = true, d
		m.peers[netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})] = &Peer{disc: d}
	}
}
