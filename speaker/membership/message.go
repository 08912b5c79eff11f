package membership

import (
	"bytes"
	"fmt"
	"net/netip"

	"github.com/hashicorp/memberlist"
)

// The caller's own messages (Config.Message) go to one member at a time over memberlist's
// reliable stream (TCP), encrypted and authenticated with the gossip keys like all gossip.
var userPrefix = []byte("portico-user\x00")

// Send sends msg to member name over a TCP stream; it returns once msg is written. The member's
// address is this group's copy: memberlist's own Nodes (Members) change under its lock while
// gossip arrives, and reading one outside it races.
func (g *Group) Send(name string, msg []byte) error {
	g.mu.Lock()
	m := g.members[name]
	var at netip.AddrPort
	if m != nil && m.alive() {
		at = m.gossip
	}
	g.mu.Unlock()
	if !at.IsValid() {
		return fmt.Errorf("no member %s", name)
	}
	to := &memberlist.Node{Name: name, Addr: at.Addr().AsSlice(), Port: at.Port()}
	return g.ml.SendReliable(to, append(bytes.Clone(userPrefix), msg...))
}

// heardMessage hands a user message to Config.Message.
func (g *Group) heardMessage(msg []byte) {
	if g.message != nil {
		g.message(msg)
	}
}
