package bfd

import (
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// Manager runs this node's BFD sessions: at most one per peer address, sharing one receiving
// socket per address family. Its zero value is not usable; make one with NewManager.
type Manager struct {
	log     logr.Logger
	metrics *metrics

	mu        sync.Mutex
	listeners map[listenerKey]*listener
	peers     map[netip.Addr]*Peer
}

// listenerKey names one receiving socket: an address family and a port.
type listenerKey struct {
	v4   bool
	port uint16
}

// NewManager makes a Manager; it opens no socket until the first session starts.
func NewManager(log logr.Logger) *Manager {
	return &Manager{log: log, metrics: newMetrics(), listeners: map[listenerKey]*listener{}, peers: map[netip.Addr]*Peer{}}
}

// Peer is one running session with one neighbour.
type Peer struct {
	name     string
	addr     netip.Addr
	disc     uint32
	hops     Hops
	m        *Manager
	conn     *net.UDPConn
	rx       chan Packet
	reconfig chan Config
	stop     chan struct{}
	done     chan struct{}
}

// Start opens a session with the neighbour at addr (sending from src, or a kernel-chosen
// address when src is zero) and reports each state change to onChange, from the session's
// goroutine. name labels its logs and metrics.
func (m *Manager) Start(name string, addr, src netip.Addr, cfg Config, onChange func(Transition)) (*Peer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.peers[addr]; dup {
		return nil, fmt.Errorf("a BFD session with %s is already running", addr)
	}
	key := listenerKey{addr.Is4(), portOf(cfg.Hops)}
	if m.listeners[key] == nil {
		l, err := listen(key.v4, key.port)
		if err != nil {
			return nil, err
		}
		m.listeners[key] = l
		go l.serve(func(r received) { m.deliver(r, key.port) })
	}
	conn, err := dialPeer(addr, src, key.port)
	if err != nil {
		return nil, err
	}
	disc := m.newDiscriminator()
	p := &Peer{name: name, addr: addr, disc: disc, hops: cfg.Hops, m: m, conn: conn, rx: make(chan Packet, 16), reconfig: make(chan Config),
		stop: make(chan struct{}), done: make(chan struct{})}
	m.peers[addr] = p
	jitter := func() float64 {
		if cfg.DetectMult == 1 {
			return 0.75 + 0.15*rand.Float64() // RFC 5880 §6.8.7: at most 90% with a multiplier of 1
		}
		return 0.75 + 0.25*rand.Float64()
	}
	s := NewSession(time.Now(), cfg, disc, random32(), Random{Jitter: jitter, Discriminator: p.renewDiscriminator})
	m.metrics.up.WithLabelValues(name).Set(0)
	m.log.Info("starting BFD session", "peer", name, "address", addr, "discriminator", disc,
		"desiredMinTx", cfg.DesiredMinTx, "requiredMinRx", cfg.RequiredMinRx, "multiplier", cfg.DetectMult, "passive", cfg.Passive, "multihop", cfg.Hops.Multihop)
	go p.run(s, onChange)
	return p, nil
}

// newDiscriminator picks a local discriminator: random, so that an attacker off the path cannot
// guess it (RFC 5880 §6.3), non-zero and unused by this Manager's sessions. Called with m.mu held.
func (m *Manager) newDiscriminator() uint32 {
	for {
		d := random32()
		if d == 0 {
			continue
		}
		inUse := false
		for _, p := range m.peers {
			inUse = inUse || p.disc == d
		}
		if !inUse {
			return d
		}
	}
}

// renewDiscriminator gives the peer's session a new local discriminator (Random.Discriminator).
func (p *Peer) renewDiscriminator() uint32 {
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	p.disc = p.m.newDiscriminator()
	p.m.log.V(1).Info("new BFD discriminator: the peer's sequence number was forgotten", "peer", p.name, "discriminator", p.disc)
	return p.disc
}

// random32 is 32 bits from the system's cryptographic generator.
func random32() uint32 {
	var b [4]byte
	_, _ = crand.Read(b[:]) // never fails (crypto/rand crashes the program rather)
	return binary.BigEndian.Uint32(b[:])
}

// deliver hands a datagram received on port to the session of its source address, if that
// session is of the port's kind and the packet's TTL is one the session accepts.
func (m *Manager) deliver(r received, port uint16) {
	m.mu.Lock()
	p := m.peers[r.from]
	m.mu.Unlock()
	if p == nil || portOf(p.hops) != port {
		m.metrics.dropped.WithLabelValues("unknown-peer").Inc()
		m.log.V(1).Info("dropping a BFD packet from an address with no session on this port", "from", r.from, "port", port)
		return
	}
	if !accepts(p.hops, r.ttl) {
		m.metrics.dropped.WithLabelValues("ttl").Inc()
		m.log.V(1).Info("dropping a BFD packet whose TTL the session does not accept", "from", r.from, "ttl", r.ttl, "multihop", p.hops.Multihop)
		return
	}
	pkt, err := Unmarshal(r.data)
	if err != nil {
		m.metrics.dropped.WithLabelValues("malformed").Inc()
		m.log.V(1).Info("dropping a BFD packet", "from", r.from, "error", err.Error())
		return
	}
	select {
	case p.rx <- pkt:
	case <-p.done:
	default:
		m.metrics.dropped.WithLabelValues("overrun").Inc() // the session is far behind; BFD tolerates a lost packet
	}
}

// Reconfigure changes the session's intervals; an Up session announces them with a poll.
func (p *Peer) Reconfigure(cfg Config) {
	select {
	case p.reconfig <- cfg:
	case <-p.done:
	}
}

// Stop tells the peer the session is administratively down and ends it.
func (p *Peer) Stop() {
	p.m.mu.Lock()
	if p.m.peers[p.addr] == p {
		delete(p.m.peers, p.addr)
	}
	p.m.mu.Unlock()
	close(p.stop)
	<-p.done
	p.conn.Close()
	p.m.metrics.up.DeleteLabelValues(p.name)
	p.m.log.Info("stopped BFD session", "peer", p.name, "address", p.addr)
}

func (p *Peer) run(s *Session, onChange func(Transition)) {
	defer close(p.done)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		var out Output
		select {
		case <-p.stop:
			p.act(s.Shutdown(), nil)
			return
		case cfg := <-p.reconfig:
			out = s.Reconfigure(time.Now(), cfg)
		case pkt := <-p.rx:
			p.m.metrics.received.WithLabelValues(p.name).Inc()
			var d *Discard
			if out, d = s.Receive(time.Now(), pkt); d != nil {
				p.m.metrics.dropped.WithLabelValues(d.Reason).Inc()
				p.m.log.V(1).Info("dropping a BFD packet", "peer", p.name, "reason", d.Reason, "detail", d.Detail)
			}
		case <-timer.C:
			out = s.Advance(time.Now())
		}
		p.act(out, onChange)
		timer.Stop()
		if d := s.Deadline(); !d.IsZero() {
			timer.Reset(time.Until(d))
		}
	}
}

// act sends what the session asked to send, and logs, counts and reports its state change.
func (p *Peer) act(out Output, onChange func(Transition)) {
	for _, pkt := range out.Send {
		if _, err := p.conn.Write(pkt.Marshal()); err != nil {
			p.m.metrics.sendErrors.WithLabelValues(p.name).Inc()
			p.m.log.V(1).Info("sending a BFD packet", "peer", p.name, "error", err.Error())
			continue
		}
		p.m.metrics.sent.WithLabelValues(p.name).Inc()
	}
	tr := out.Transition
	if tr == nil {
		return
	}
	p.m.log.Info("BFD session state", "peer", p.name, "address", p.addr, "from", tr.From, "to", tr.To, "diagnostic", tr.Diag)
	p.m.metrics.changes.WithLabelValues(p.name, tr.To.String()).Inc()
	up := 0.0
	if tr.To == Up {
		up = 1
	}
	p.m.metrics.up.WithLabelValues(p.name).Set(up)
	if onChange != nil {
		onChange(*tr)
	}
}

// Close ends every session and closes the receiving sockets.
func (m *Manager) Close() {
	m.mu.Lock()
	peers := make([]*Peer, 0, len(m.peers))
	for _, p := range m.peers {
		peers = append(peers, p)
	}
	m.mu.Unlock()
	for _, p := range peers {
		p.Stop()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for v4, l := range m.listeners {
		l.conn.Close()
		delete(m.listeners, v4)
	}
}
