package membership

import (
	"net/netip"
	"time"

	"github.com/hashicorp/memberlist"
)

// member is what this node knows of another: memberlist's word, and what the goodbye and the
// fast path (watch.go) add to it. Each names the life it is about, so nothing said of one
// process of a node sticks to the next one.
type member struct {
	inList    bool               // memberlist counts it alive (or suspects it)
	dropped   time.Time          // when memberlist last stopped counting it
	life      string             // the life it gossips
	gossip    netip.AddrPort     // where it gossips (the fast path dials it)
	to        memberlist.Address // the same, as memberlist sends to it (heartbeats, goodbyes)
	saidBye   string             // the life that said goodbye
	foundDead string             // the life the fast path found dead
	heard     time.Time          // its last heartbeat's arrival; zero: it sends none, so it is not watched
	recounted time.Time          // its silence counted afresh from here when after heard (silentSince)
	seq       uint64             // its last direct heartbeat's sequence number (heartbeat.go)
	beating   bool               // its heartbeats arrive: alive even if memberlist dropped it
	checking  bool               // a check of its kernel is under way
}

// alive: memberlist counts it, or its heartbeats prove it, and its life has neither said
// goodbye nor been found dead.
func (m *member) alive() bool {
	return (m.inList || m.beating) && m.saidBye != m.life && m.foundDead != m.life
}

// silentSince is where the member's silence counts from: its last heartbeat, or later where a
// check found it alive or this node stalled (watch.go). heard itself stays the last arrival,
// which the acceptance rule orders heartbeats by: moved past a heartbeat that arrived but was
// not read yet, it would refuse that one as out of order.
func (m *member) silentSince() time.Time {
	if m.recounted.After(m.heard) {
		return m.recounted
	}
	return m.heard
}

// heartbeatsFor is how long heartbeats still go to a member memberlist dropped: a partition
// that heals within it is seen by the next heartbeat, not by memberlist's next join.
const heartbeatsFor = time.Minute

// wantsHeartbeats reports whether this node sends the member heartbeats (and its goodbye).
func (m *member) wantsHeartbeats(now time.Time) bool {
	return m.gossip.IsValid() && m.life != "" && m.saidBye != m.life && (m.inList || now.Sub(m.dropped) < heartbeatsFor)
}

func (m *member) listed(n *memberlist.Node) {
	if life := string(n.Meta); life != m.life {
		m.life, m.seq = life, 0
	}
	m.inList, m.to = true, memberlist.Address{Addr: n.Address(), Name: n.Name}
	if addr, ok := netip.AddrFromSlice(n.Addr); ok {
		m.gossip = netip.AddrPortFrom(addr.Unmap(), n.Port)
	}
}

func (m *member) unlisted(now time.Time) { m.inList, m.dropped = false, now }

// update changes what is known of a member under the lock, and tells the consumer when that
// changes whether it is alive.
func (g *Group) update(name, how string, change func(*member)) {
	g.mu.Lock()
	m := g.members[name]
	if m == nil {
		m = &member{}
		g.members[name] = m
	}
	was := m.alive()
	change(m)
	alive := m.alive()
	g.mu.Unlock()
	if alive != was {
		select {
		case g.changes <- Change{Name: name, Joined: alive, At: time.Now(), How: how}:
		default: // the consumer recomputes from Alive() anyway; a dropped change loses no state
		}
	}
}
