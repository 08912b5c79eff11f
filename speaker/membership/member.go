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
	inList    bool           // memberlist counts it alive
	life      string         // the life it gossips
	gossip    netip.AddrPort // where it gossips (the fast path's check dials it)
	saidBye   string         // the life that said goodbye
	foundDead string         // the life the fast path found dead
	heard     time.Time      // its last heartbeat; zero: it sends none, so it is not watched
	checking  bool           // a check of its kernel is under way
}

func (m *member) alive() bool {
	return m.inList && m.saidBye != m.life && m.foundDead != m.life
}

func (m *member) listed(n *memberlist.Node) {
	m.inList, m.life = true, string(n.Meta)
	if addr, ok := netip.AddrFromSlice(n.Addr); ok {
		m.gossip = netip.AddrPortFrom(addr.Unmap(), n.Port)
	}
}

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
