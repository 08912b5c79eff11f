// Package membership tells a speaker which other speakers are alive, through
// hashicorp/memberlist gossip. It knows nothing of Kubernetes: the caller hands it peer
// addresses (found through the apiserver) and the encryption key (read from a Secret).
package membership

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Config says how to gossip.
type Config struct {
	// Name is this node's name, unique in the group.
	Name string
	// BindAddr and BindPort are where memberlist listens (UDP and TCP).
	BindAddr string
	BindPort int
	// Keys encrypt the gossip; none sends it in clear.
	Keys Keys
	// Admit decides whether another member may join under the name it claims, from the address
	// it claims; an error refuses it (it never counts as alive here). Nil admits everyone.
	Admit func(name string, addr netip.Addr) error
	// Detection tunes how fast a silent member is declared dead.
	Detection Detection
	// Log receives memberlist's own log lines; nil discards them.
	Log io.Writer
	// Resumed, when set, is called with a member's gossip address when its heartbeats arrive
	// again after a silence of more than two heartbeats (a healed partition, or a member
	// starved of CPU): this node hears it again, but its own packets to it may still wait for
	// the kernel to resolve the member's address; it is then called with the addresses of this
	// node's watchers (ring.go) too. It must not block.
	Resumed func(addr netip.Addr)
	// Message, when set, receives what another member sent with Send (its sender is for the
	// message to say). It is called on memberlist's goroutine for that stream, one at a time
	// per stream.
	Message func(msg []byte)

	// took, in tests, is told of each heartbeat taken and when it was read.
	took func(h heartbeat, read time.Time)
}

// Detection is the failure-detection timing. A member that stops answering is probed within
// ProbeInterval, gets ProbeTimeout to answer, and is then suspected for SuspicionMult ×
// max(1, log10(members)) × ProbeInterval before it is declared dead. Shorter settings fail over
// faster and suspect more often under CPU load (BENCHMARKS.md shows the trade-off).
type Detection struct {
	ProbeInterval time.Duration
	ProbeTimeout  time.Duration
	SuspicionMult int
	// Heartbeat turns on the fast path (watch.go): each member sends its watchers (ring.go) a
	// heartbeat this often, and one silent for two heartbeats is checked at its kernel. Zero
	// leaves detection to memberlist alone.
	Heartbeat time.Duration
}

// DefaultDetection leaves dead members to the fast path, which finds a killed speaker or a cut
// link in a few heartbeats; memberlist's own probes (one a second, 500 ms for the answer, 2 s
// of suspicion in a cluster of up to ten nodes) are the backstop, and cost an idle speaker
// little.
var DefaultDetection = Detection{ProbeInterval: time.Second, ProbeTimeout: 500 * time.Millisecond, SuspicionMult: 2,
	Heartbeat: 50 * time.Millisecond}

// Change is a member joining or leaving, with the time it was noticed and how.
type Change struct {
	Name   string
	Joined bool
	At     time.Time
	// How says what showed it: memberlist, a goodbye, or the fast path's check.
	How string
}

// Group is this node's view of the gossip group.
type Group struct {
	ml      *memberlist.Memberlist
	net     *transport
	keyring *memberlist.Keyring // nil: gossip in clear
	changes chan Change
	self    string // Config.Name

	life      []byte // this process's life: see goodbye.go
	heartbeat time.Duration
	resumed   func(netip.Addr)                  // Config.Resumed
	message   func([]byte)                      // Config.Message
	seal      sealer                            // direct heartbeats (heartbeat.go)
	seq       uint64                            // the last direct heartbeat's sequence number; the watch loop's alone
	beats     *heartbeatSocket                  // where direct heartbeats arrive; nil: at the transport. The watch loop's alone
	refused   [refusedReasonCount]atomic.Uint64 // heartbeats refused, by reason (accept.go)
	sources   atomic.Bool                       // a member's gossip address changed: steer its heartbeats (heartsock.go)
	log       *log.Logger
	took      func(heartbeat, time.Time) // Config.took

	mu      sync.Mutex
	members map[string]*member
	stop    chan struct{}  // closed by stopWatching: the fast path ends
	watched sync.WaitGroup // the watch loop
	stopped sync.Once
	checks  atomic.Int64 // checks the fast path started (tests wait on it)

	leave sync.Once
	left  error
}

// Start starts gossiping. Changes (buffered) receives every join and leave after that.
func Start(cfg Config) (*Group, error) {
	mc, err := memberlistConfig(cfg)
	if err != nil {
		return nil, err
	}
	g := &Group{changes: make(chan Change, 1024), self: cfg.Name, life: newLife(), heartbeat: cfg.Detection.Heartbeat, resumed: cfg.Resumed, message: cfg.Message,
		keyring: mc.Keyring, members: map[string]*member{}, stop: make(chan struct{}), log: mc.Logger,
		took: cfg.took}
	if g.keyring != nil {
		g.seal.keys = g.keyring.GetKeys
	}
	mc.Events = events{g}
	mc.Delegate = delegate{g}
	if cfg.Admit != nil {
		mc.Alive = admission{self: cfg.Name, admit: cfg.Admit}
	}
	t, err := listen(cfg.BindAddr, cfg.BindPort, mc.Logger, g.heardDirect, func() { g.refuse(refusedSource) })
	if err != nil {
		return nil, err
	}
	mc.Transport = t
	if g.heartbeat > 0 {
		if g.beats, err = listenHeartbeats(t.udp); err != nil {
			mc.Logger.Printf("[WARN] portico: %v; direct heartbeats go through the gossip socket's reader", err)
		} else {
			t.steered.Store(true)
		}
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		_ = t.Shutdown()
		if g.beats != nil {
			g.beats.close()
		}
		return nil, fmt.Errorf("membership: %w", err)
	}
	g.ml, g.net = ml, t
	if g.heartbeat > 0 {
		g.watched.Add(1)
		go g.watch()
	}
	return g, nil
}

// memberlistConfig is memberlist's configuration for cfg: its name and port, the failure
// detector's timing, the keyring and the logger; the group fills in the rest.
func memberlistConfig(cfg Config) (*memberlist.Config, error) {
	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.Name
	mc.BindAddr, mc.AdvertiseAddr = cfg.BindAddr, ""
	mc.BindPort, mc.AdvertisePort = cfg.BindPort, cfg.BindPort
	d := cfg.Detection
	if d.ProbeInterval <= 0 || d.ProbeTimeout <= 0 || d.SuspicionMult < 1 || d.ProbeTimeout >= d.ProbeInterval || d.Heartbeat < 0 {
		return nil, fmt.Errorf("membership: bad failure-detection timing %+v (need 0 < probe timeout < probe interval, suspicion multiplier ≥ 1, heartbeat ≥ 0)", d)
	}
	mc.ProbeInterval, mc.ProbeTimeout, mc.SuspicionMult = d.ProbeInterval, d.ProbeTimeout, d.SuspicionMult
	// memberlist's default: its gossip ticks every interval, something queued or not. Neither
	// failover waits for it: a leaving member says goodbye directly (goodbye.go) and the fast
	// path finds a dead one itself.
	mc.GossipInterval = 200 * time.Millisecond
	// Compression allocates a compressor's tables for every packet, heartbeats included, and
	// the garbage they make was most of an idle speaker's CPU; the packets are a few dozen
	// bytes. Members still read compressed packets from older speakers.
	mc.EnableCompression = false
	// Joining a node that is gone must not hold a starting speaker for memberlist's default 10 s.
	mc.TCPTimeout = time.Second
	if !cfg.Keys.None() {
		ring, err := cfg.Keys.keyring()
		if err != nil {
			return nil, err
		}
		mc.Keyring = ring
	}
	out := cfg.Log
	if out == nil {
		out = io.Discard
	}
	mc.Logger = log.New(out, "memberlist ", log.LstdFlags)
	return mc, nil
}

// Changes delivers joins and leaves, oldest first.
func (g *Group) Changes() <-chan Change { return g.changes }

// Alive lists the members alive now, this node included, sorted.
func (g *Group) Alive() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]string, 0, len(g.members))
	for n, m := range g.members {
		if m.alive() {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// IsAlive reports whether name is a live member.
func (g *Group) IsAlive(name string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := g.members[name]
	return m != nil && m.alive()
}

// Join contacts peers ("host:port"); it succeeds when one answered.
func (g *Group) Join(peers []string) error {
	if len(peers) == 0 {
		return nil
	}
	_, err := g.ml.Join(peers)
	return err
}

// Leave tells the others this node is going (they take over at once, without waiting for
// failure detection) and stops gossiping. Later calls return the first call's result
// (memberlist panics on a Leave after Shutdown).
func (g *Group) Leave(timeout time.Duration) error {
	g.leave.Do(func() {
		g.stopWatching()
		g.sayGoodbye()
		g.left = g.ml.Leave(timeout)
		if err := g.ml.Shutdown(); g.left == nil {
			g.left = err
		}
	})
	return g.left
}

// Port is the port memberlist listens on (the one chosen when Config.BindPort was 0).
func (g *Group) Port() int { return int(g.ml.LocalNode().Port) }

// HostPort joins an address and a port the way Join expects.
func HostPort(addr string, port int) string { return net.JoinHostPort(addr, fmt.Sprint(port)) }

type events struct{ g *Group }

func (e events) NotifyJoin(n *memberlist.Node) {
	// A member memberlist takes back is alive again, even the life the fast path found dead.
	e.g.update(n.Name, "memberlist", func(m *member) { e.listed(m, n); m.foundDead = "" })
}
func (e events) NotifyLeave(n *memberlist.Node) {
	e.g.update(n.Name, "memberlist", func(m *member) { m.unlisted(time.Now()) })
}
func (e events) NotifyUpdate(n *memberlist.Node) {
	e.g.update(n.Name, "memberlist", func(m *member) { e.listed(m, n) })
}

// listed notes what memberlist lists of m, and whether where it gossips from changed.
func (e events) listed(m *member, n *memberlist.Node) {
	was := m.gossip
	m.listed(n)
	if m.gossip != was {
		e.g.sources.Store(true)
	}
}

// admission refuses, before memberlist stores it, an alive message for another member that
// Admit rejects. Merges on join go through the same path, so one hook covers both.
type admission struct {
	self  string
	admit func(name string, addr netip.Addr) error
}

func (a admission) NotifyAlive(n *memberlist.Node) error {
	if n.Name == a.self {
		return nil // memberlist itself refutes anyone else claiming this node's name
	}
	addr, ok := netip.AddrFromSlice(n.Addr)
	if !ok {
		return fmt.Errorf("member %q claims no valid address", n.Name)
	}
	return a.admit(n.Name, addr.Unmap())
}
