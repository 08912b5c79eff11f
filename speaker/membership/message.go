package membership

import (
	"bytes"
	"fmt"
)

// The caller's own messages (Config.Message) go to one member at a time over memberlist's
// reliable stream (TCP), encrypted and authenticated with the gossip keys like all gossip.
var userPrefix = []byte("portico-user\x00")

// Send sends msg to member name over a TCP stream; it returns once msg is written.
func (g *Group) Send(name string, msg []byte) error {
	for _, n := range g.ml.Members() {
		if n.Name == name {
			return g.ml.SendReliable(n, append(bytes.Clone(userPrefix), msg...))
		}
	}
	return fmt.Errorf("no member %s", name)
}

// heardMessage hands a user message to Config.Message.
func (g *Group) heardMessage(msg []byte) {
	if g.message != nil {
		g.message(msg)
	}
}
