package membership

import (
	"bytes"
	"crypto/rand"
	"time"

	"github.com/hashicorp/memberlist"
)

// A leaving member says goodbye to each other member directly, one UDP packet each, before
// memberlist's own leave: that one is gossiped on the next round (up to GossipInterval later),
// and the SIGTERM failover should cost a packet, not a round. Goodbyes and heartbeats name the
// sender's life (a random ID it publishes as its node metadata), so a message that arrives
// after the node restarted says nothing of the new process (the life ends with directMark:
// heartbeat.go). With keys set the packets are encrypted and authenticated like all gossip; a
// member holding the key could equally gossip a death.

// Message kinds; other user messages are ignored.
var (
	goodbyePrefix   = []byte("portico-goodbye\x00")
	heartbeatPrefix = []byte("portico-heartbeat\x00")
	deathPrefix     = []byte("portico-dead\x00") // names the dead member, not the sender (ring.go)
)

// newLife is this process's life ID: 8 random bytes and directMark.
func newLife() []byte {
	life := make([]byte, lifeRandom)
	_, _ = rand.Read(life)
	return append(life, directMark)
}

func message(kind []byte, name string, life []byte) []byte {
	msg := append(bytes.Clone(kind), name...)
	return append(append(msg, 0), life...)
}

// parseMessage returns the name and life a message of the kind names; ok is false for
// anything else.
func parseMessage(kind, msg []byte) (name string, life string, ok bool) {
	rest, ok := bytes.CutPrefix(msg, kind)
	if !ok {
		return "", "", false
	}
	n, l, ok := bytes.Cut(rest, []byte{0})
	if !ok || len(n) == 0 || len(l) == 0 {
		return "", "", false
	}
	return string(n), string(l), true
}

// sendAll sends msg to every other member that wants heartbeats, best effort.
func (g *Group) sendAll(msg []byte) {
	now := time.Now()
	var to []memberlist.Address
	g.mu.Lock()
	for name, m := range g.members {
		if name != g.self && m.wantsHeartbeats(now) {
			to = append(to, m.to)
		}
	}
	g.mu.Unlock()
	g.send(to, msg)
}

func (g *Group) send(to []memberlist.Address, msg []byte) {
	for _, a := range to {
		_ = g.ml.SendToAddress(a, msg) // a lost packet costs what the message would save
	}
}

// sayGoodbye tells every other member this life is over; memberlist's own leave follows.
func (g *Group) sayGoodbye() { g.sendAll(message(goodbyePrefix, g.self, g.life)) }

// heardGoodbye marks the member gone if the goodbye is from the life it gossips now.
func (g *Group) heardGoodbye(name, life string) {
	g.update(name, "goodbye", func(m *member) { m.saidBye = life })
}

// delegate publishes the life and hears goodbyes, heartbeats, death notices and user messages. Only NodeMeta and NotifyMsg
// do anything. Heartbeats come this way from members that take no direct ones (heartbeat.go):
// one that names a life that does was recorded and sent again, and is refused (accept.go).
type delegate struct{ g *Group }

func (d delegate) NodeMeta(int) []byte { return d.g.life }

func (d delegate) NotifyMsg(msg []byte) {
	if name, life, ok := parseMessage(heartbeatPrefix, msg); ok {
		d.g.heardHeartbeat(heartbeat{name: name, life: life, at: time.Now()})
	} else if name, life, ok := parseMessage(goodbyePrefix, msg); ok {
		d.g.heardGoodbye(name, life)
	} else if name, life, ok := parseMessage(deathPrefix, msg); ok {
		d.g.heardOfDeath(name, life)
	} else if rest, ok := bytes.CutPrefix(msg, userPrefix); ok {
		d.g.heardMessage(rest)
	}
}

func (delegate) GetBroadcasts(int, int) [][]byte { return nil }
func (delegate) LocalState(bool) []byte          { return nil }
func (delegate) MergeRemoteState([]byte, bool)   {}

var _ memberlist.Delegate = delegate{}
