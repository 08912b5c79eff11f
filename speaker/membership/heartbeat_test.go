package membership

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/portico-lb/portico/internal/netlab"
)

// seqOf is the sequence number of the last direct heartbeat g took from name.
func seqOf(g *Group, name string) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if m := g.members[name]; m != nil {
		return m.seq
	}
	return 0
}

// TestHeartbeatsPassTheGossipReader: direct heartbeats arrive at the heartbeats' socket, not at
// the gossip socket memberlist's reader waits on (which would wake for each one), and
// memberlist's own packets on the same port still reach memberlist.
func TestHeartbeatsPassTheGossipReader(t *testing.T) {
	a, b := startPair(t)
	if a.beats == nil {
		t.Fatal("a has no heartbeats' socket")
	}
	from, received := seqOf(a, "b"), a.net.received.Load()
	netlab.WaitFor(t, "20 more heartbeats from b", 5*time.Second, func() bool { return seqOf(a, "b") >= from+20 })
	// memberlist probes every 5 s here and gossips only what is queued: nothing.
	if n := a.net.received.Load() - received; n >= 10 {
		t.Fatalf("the gossip socket received %d packets while 20 heartbeats arrived: the heartbeats are not steered past it", n)
	}
	for _, ping := range [][2]*Group{{a, b}, {b, a}} {
		to := ping[1].ml.LocalNode()
		if _, err := ping[0].ml.Ping(to.Name, &net.UDPAddr{IP: to.Addr, Port: int(to.Port)}); err != nil {
			t.Fatalf("memberlist's ping from %s to %s: %v", ping[0].self, to.Name, err)
		}
	}
}

// TestHeartbeatsWithoutTheirSocket: a member without the heartbeats' socket (its fast path
// off here; a kernel that refuses the filter likewise) takes direct heartbeats at the gossip
// socket's reader.
func TestHeartbeatsWithoutTheirSocket(t *testing.T) {
	a, _ := startPair(t, func(c *Config) { c.Detection.Heartbeat = 0 })
	if a.beats != nil {
		t.Fatal("a has a heartbeats' socket with its fast path off")
	}
	from := seqOf(a, "b")
	netlab.WaitFor(t, "more heartbeats from b", 5*time.Second, func() bool { return seqOf(a, "b") >= from+5 })
}

// TestForgedHeartbeatsAreIgnored: with a key set, a heartbeat sent in clear, one sealed with
// another key and one recorded and sent again do not bring back a member found dead; the same
// heartbeat sealed with the key and numbered past the last does.
func TestForgedHeartbeatsAreIgnored(t *testing.T) {
	gs := startGroup(t, "a", "b", "c")
	a, b, c := gs["a"], gs["b"], gs["c"]
	netlab.WaitFor(t, "a heartbeat from b", 5*time.Second, func() bool { return seqOf(a, "b") > 0 })
	b.leave.Do(func() { // killed: no goodbye, its sockets closed
		b.stopWatching()
		b.left = b.ml.Shutdown()
	})
	netlab.WaitFor(t, "a finds b dead", 5*time.Second, func() bool { return !a.IsAlive("b") })

	lan, err := net.Dial("udp", HostPort("127.0.0.1", a.Port()))
	must(t, err)
	defer lan.Close()
	sendTo := func(packet []byte, err error) {
		t.Helper()
		must(t, err)
		_, err = lan.Write(packet)
		must(t, err)
	}
	next := uint64(1 << 40)
	other := sealer{keys: func() [][]byte { return [][]byte{[]byte("fedcba9876543210")} }}
	sendTo(append([]byte{heartbeatMagic}, heartbeatBody(next, string(a.life), "b", b.life)...), nil) // in clear
	sendTo(other.seal(heartbeatBody(next, string(a.life), "b", b.life)))                             // another key
	sendTo(b.seal.seal(heartbeatBody(seqOf(a, "b"), string(a.life), "b", b.life)))                   // recorded
	// c's heartbeat, sent after them on the same path, is taken after them.
	sendTo(c.seal.seal(heartbeatBody(next, string(a.life), "c", c.life)))
	netlab.WaitFor(t, "a takes the heartbeat sent after the forged ones", 5*time.Second, func() bool { return seqOf(a, "c") == next })
	if a.IsAlive("b") {
		t.Fatal("a forged heartbeat brought b back")
	}
	sendTo(b.seal.seal(heartbeatBody(next, string(a.life), "b", b.life)))
	netlab.WaitFor(t, "b's own heartbeat brings it back", 5*time.Second, func() bool { return a.IsAlive("b") })
}

// olderMember is a speaker from before direct heartbeats named their receiver, as the wire
// sees it: memberlist with its life (8 random bytes, then 'd' if it took direct heartbeats
// that named no receiver) and heartbeats as user messages to and from this version.
type olderMember struct {
	life []byte
	mu   sync.Mutex
	from map[string]int // heartbeats received, by sender
}

func (o *olderMember) NodeMeta(int) []byte { return o.life }
func (o *olderMember) NotifyMsg(msg []byte) {
	if name, _, ok := parseMessage(heartbeatPrefix, msg); ok {
		o.mu.Lock()
		o.from[name]++
		o.mu.Unlock()
	}
}
func (o *olderMember) GetBroadcasts(int, int) [][]byte { return nil }
func (o *olderMember) LocalState(bool) []byte          { return nil }
func (o *olderMember) MergeRemoteState([]byte, bool)   {}

func (o *olderMember) heard(name string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.from[name]
}

// TestOlderMembersKeepTheFastPath: in a rolling update, a member from before direct heartbeats,
// and one from before they named their receiver, get their heartbeats as memberlist user
// messages, and their own are heard.
func TestOlderMembersKeepTheFastPath(t *testing.T) {
	for _, life := range []string{"8 bytes!", "8 bytes!d"} {
		t.Run(life, func(t *testing.T) { olderMemberKeepsTheFastPath(t, life) })
	}
}

func olderMemberKeepsTheFastPath(t *testing.T, life string) {
	key := []byte("0123456789abcdef")
	a := startWith(t, Config{Name: "a", BindAddr: "127.0.0.1", Keys: Keys{Primary: key}})
	old := &olderMember{life: []byte(life), from: map[string]int{}}
	mc := memberlist.DefaultLANConfig()
	mc.Name, mc.BindAddr, mc.BindPort, mc.Delegate = "old", "127.0.0.1", 0, old
	ring, err := memberlist.NewKeyring(nil, key)
	must(t, err)
	mc.Keyring, mc.LogOutput = ring, testWriter{t}
	ml, err := memberlist.Create(mc)
	must(t, err)
	t.Cleanup(func() { _ = ml.Shutdown() })
	_, err = ml.Join([]string{HostPort("127.0.0.1", a.Port())})
	must(t, err)
	waitAlive(t, a, []string{"a", "old"})

	netlab.WaitFor(t, "the older member hears a's heartbeats", 5*time.Second, func() bool { return old.heard("a") >= 3 })
	to := ml.LocalNode() // the older member's heartbeat, as it sends it
	for _, n := range ml.Members() {
		if n.Name == "a" {
			to = n
		}
	}
	must(t, ml.SendToAddress(memberlist.Address{Addr: to.Address(), Name: to.Name}, message(heartbeatPrefix, "old", old.life)))
	netlab.WaitFor(t, "a hears the older member's heartbeat", 5*time.Second, func() bool { return heard(a, "old") })
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
