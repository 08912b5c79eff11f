package membership

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"syscall"
	"time"

	"github.com/hashicorp/memberlist"
)

// The fast path. memberlist declares a silent member dead only after a probe, its timeout and
// a suspicion period (seconds by default), and shorter timers declare members dead that are
// merely starved of CPU. The node's kernel tells the two apart, because it answers even when
// the process is starved: a TCP connection to the member's gossip port is accepted by the kernel
// while the process lives (however slow it is), refused once the process is gone (a killed
// speaker on a live node), and unanswered when the node or its link is down. So each member
// sends its watchers (ring.go) a heartbeat (heartbeat.go) each Heartbeat, and a
// watched member silent for two heartbeats is checked:
//
//	accepted            → alive (starved, or losing packets): left to memberlist;
//	refused             → dead at once;
//	no answer in time   → dead (the node or its link).
//
// A watcher that finds a member dead tells every other member (a death notice). A member found
// dead, or told of, that memberlist still lists is checked again every heartbeat, and one whose
// kernel accepts is alive again: so a notice that was wrong (a watcher cut off from that member
// alone) and a healed partition both undo themselves. A heartbeat from the life found dead
// brings it back too, as does memberlist taking it back. Nothing is judged while this process
// was starved itself: the silence would be its own. Members that send no heartbeats (the fast
// path turned off there) are not watched.

func (g *Group) watch() {
	defer g.watched.Done()
	tick := time.NewTicker(g.heartbeat)
	defer tick.Stop()
	if g.beats != nil {
		defer g.beats.close()
	}
	last := time.Now()
	for {
		select {
		case <-g.stop:
			return
		case <-tick.C:
		}
		if g.beats != nil {
			if g.sources.Swap(false) {
				g.steer()
			}
			g.beats.readAll(g.heardDirect)
		}
		now := time.Now()
		g.sendHeartbeats(now)
		if now.Sub(last) > 2*g.heartbeat {
			g.forgive(now)
		} else {
			g.checkSilent(now)
		}
		last = now
	}
}

// steer has the heartbeats' socket take heartbeats from the members' addresses alone
// (heartsock.go).
func (g *Group) steer() {
	var sources []netip.Addr
	g.mu.Lock()
	for name, m := range g.members {
		if name != g.self && m.gossip.IsValid() && !slices.Contains(sources, m.gossip.Addr()) {
			sources = append(sources, m.gossip.Addr())
		}
	}
	g.mu.Unlock()
	if err := g.beats.steer(sources); err != nil {
		g.log.Printf("[WARN] portico: steering heartbeats by their source: %v; the heartbeats' socket takes them from any address", err)
	}
}

// ringLocked is the ring of the live members, this node included; g.mu is held.
func (g *Group) ringLocked() ring {
	names := []string{g.self}
	for name, m := range g.members {
		if m.alive() && m.gossip.IsValid() && m.life != "" {
			names = append(names, name)
		}
	}
	return newRing(names)
}

// sendHeartbeats sends this node's heartbeat to its watchers, and to the members that want
// heartbeats but are not counted alive: a partition that heals is seen at their first one.
func (g *Group) sendHeartbeats(now time.Time) {
	var direct []directTo
	var to []memberlist.Address
	g.mu.Lock()
	watchers := g.ringLocked().after(g.self)
	for name, m := range g.members {
		if name == g.self || !m.wantsHeartbeats(now) || (m.alive() && !slices.Contains(watchers, name)) {
			continue
		}
		if takesDirect(m.life) {
			direct = append(direct, directTo{m.gossip, m.life})
		} else {
			to = append(to, m.to) // a member from before direct heartbeats named their receiver
		}
	}
	g.mu.Unlock()
	if len(to) > 0 {
		g.send(to, message(heartbeatPrefix, g.self, g.life))
	}
	if len(direct) == 0 {
		return
	}
	g.seq++
	for _, d := range direct {
		packet, err := g.seal.seal(heartbeatBody(g.seq, d.life, g.self, g.life))
		if err != nil {
			return // the keys were validated: this is the random source failing, and the next tick tries again
		}
		// A lost heartbeat is what the fast path is made for.
		if g.beats != nil {
			_ = g.beats.send(packet, d.addr)
			g.net.sent.Add(1)
		} else {
			_ = g.net.writeDirect(packet, d.addr)
		}
	}
}

// directTo is a member that takes direct heartbeats: where it gossips, and its life.
type directTo struct {
	addr netip.AddrPort
	life string
}

// heardDirect takes a direct heartbeat (heartbeat.go) that arrived at that time.
func (g *Group) heardDirect(packet []byte, at time.Time) {
	body, ok := g.seal.open(packet)
	if !ok {
		g.refuse(refusedUnreadable)
		return
	}
	h, ok := parseHeartbeatBody(body)
	if !ok || h.seq == 0 {
		g.refuse(refusedUnreadable)
		return
	}
	h.at = at
	g.heardHeartbeat(h)
}

// stopWatching ends the watch loop, and with it the heartbeats' socket.
func (g *Group) stopWatching() {
	g.stopped.Do(func() { close(g.stop) })
	g.watched.Wait()
}

// forgive restarts every member's silence: this process was not running to hear them.
func (g *Group) forgive(now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, m := range g.members {
		if !m.heard.IsZero() {
			m.recounted = now
		}
	}
}

// checkSilent checks each member this node watches that memberlist counts alive and that has
// been silent for two heartbeats, and each member found dead that memberlist still lists; it
// stops counting the heartbeats of one silent for three.
func (g *Group) checkSilent(now time.Time) {
	var stopped []string
	g.mu.Lock()
	watched := g.ringLocked().before(g.self)
	for name, m := range g.members {
		if name == g.self || !m.gossip.IsValid() || m.checking {
			continue
		}
		if m.inList && m.life != "" && m.foundDead == m.life {
			g.startCheck(name, m)
			continue
		}
		silence := now.Sub(m.silentSince())
		if m.heard.IsZero() || silence <= 2*g.heartbeat {
			continue
		}
		if m.beating && silence > 3*g.heartbeat {
			stopped = append(stopped, name)
		}
		if m.inList && m.alive() && slices.Contains(watched, name) {
			g.startCheck(name, m)
		}
	}
	g.mu.Unlock()
	for _, name := range stopped {
		g.update(name, "its heartbeats stopped after memberlist had dropped it", func(m *member) { m.beating = false })
	}
}

// startCheck starts a check of m's kernel; g.mu is held.
func (g *Group) startCheck(name string, m *member) {
	m.checking = true
	g.checks.Add(1)
	go g.check(name, m.life, m.gossip)
}

// check asks the member's kernel whether its gossip port is open, and judges.
func (g *Group) check(name, life string, gossip netip.AddrPort) {
	start := time.Now()
	wait := 2 * g.heartbeat
	var dead string
	switch err := askKernel(gossip, wait); {
	case err == nil: // accepted: alive
	case errors.Is(err, syscall.ECONNREFUSED):
		dead = fmt.Sprintf("silent for two heartbeats and its node refused a connection to %s: the speaker is gone", gossip)
	default:
		dead = fmt.Sprintf("silent for two heartbeats and its node did not answer at %s within %s: %v", gossip, wait, err)
	}
	found := false
	g.update(name, dead, func(m *member) {
		m.checking = false
		if m.life != life {
			return
		}
		if dead == "" || m.heard.After(start) {
			m.recounted = time.Now() // the next check waits for another silence
			m.foundDead = ""         // alive, whatever was found or told before
			return
		}
		found = m.foundDead != life
		m.foundDead = life
	})
	if found {
		g.sendAll(message(deathPrefix, name, []byte(life)))
	}
}

// heardOfDeath marks the member dead when a watcher found the life it gossips now dead, unless
// its heartbeats reach this node: then this node's own check decides.
func (g *Group) heardOfDeath(name, life string) {
	if name == g.self {
		return // this process lives: the watcher lost it, and its checks will find it again
	}
	g.update(name, "a watcher found it dead", func(m *member) {
		if m.life == life && (m.heard.IsZero() || time.Since(m.silentSince()) > 2*g.heartbeat) {
			m.foundDead = life
		}
	})
}

// heardHeartbeat notes a heartbeat that acceptHeartbeat takes: its sender's current life is
// alive whatever a check found, and Config.Resumed is told when it ends a silence: of the
// sender, and of this node's watchers, whose entries in this node's kernel may wait to be
// resolved as well (its own link may be the one that was down).
func (g *Group) heardHeartbeat(h heartbeat) {
	g.mu.Lock()
	known := g.members[h.name] != nil
	g.mu.Unlock()
	if !known { // memberlist lists no such member: nothing to note, and no entry made for a made-up name
		g.refuse(refusedOtherLife)
		return
	}
	var resumed []netip.Addr
	refused := ""
	g.update(h.name, "heartbeat", func(m *member) {
		var after sender
		refused, after = acceptHeartbeat(h, sender{life: m.life, seq: m.seq, heard: m.heard}, string(g.life), g.seal.keys != nil)
		if refused != "" {
			return
		}
		if !m.heard.IsZero() && h.at.Sub(m.silentSince()) > 2*g.heartbeat {
			resumed = append(resumed, m.gossip.Addr())
		}
		m.seq, m.heard, m.beating, m.foundDead = after.seq, after.heard, true, ""
	})
	if refused != "" {
		g.refuse(refused)
		return
	}
	if g.took != nil {
		g.took(h, time.Now())
	}
	if len(resumed) == 0 || g.resumed == nil {
		return
	}
	g.mu.Lock()
	for _, w := range g.ringLocked().after(g.self) {
		if m := g.members[w]; w != h.name && m != nil && m.gossip.IsValid() {
			resumed = append(resumed, m.gossip.Addr())
		}
	}
	g.mu.Unlock()
	for _, addr := range resumed {
		g.resumed(addr)
	}
}
