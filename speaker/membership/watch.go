package membership

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"time"
)

// The fast path. memberlist declares a silent member dead only after a probe, its timeout and
// a suspicion period (about 0.7 s by default), and shorter timers declare members dead that are
// merely starved of CPU. The node's kernel tells the two apart, because it answers even when
// the process is starved: a TCP connection to the member's gossip port is accepted by the kernel
// while the process lives (however slow it is), refused once the process is gone (a killed
// speaker on a live node), and unanswered when the node or its link is down. So each member
// sends every other one a heartbeat (a memberlist user message) each Heartbeat, and one silent
// for two heartbeats is checked:
//
//	accepted            → alive (starved, or losing packets): left to memberlist;
//	refused             → dead at once;
//	no answer in time   → dead (the node or its link).
//
// A heartbeat from the life found dead brings it back (a healed partition), as does memberlist
// taking it back. Nothing is judged while this process was starved itself: the silence would be
// its own. Members that send no heartbeats (the fast path turned off there) are not watched.
// The cost is a packet per member pair per heartbeat, so large clusters may turn it off.

func (g *Group) watch() {
	tick := time.NewTicker(g.heartbeat)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-g.stop:
			return
		case <-tick.C:
		}
		g.sendAll(heartbeatPrefix)
		now := time.Now()
		if now.Sub(last) > 2*g.heartbeat {
			g.forgive(now)
		} else {
			g.checkSilent(now)
		}
		last = now
	}
}

func (g *Group) stopWatching() { g.stopped.Do(func() { close(g.stop) }) }

// forgive restarts every member's silence: this process was not running to hear them.
func (g *Group) forgive(now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, m := range g.members {
		if !m.heard.IsZero() {
			m.heard = now
		}
	}
}

// checkSilent checks each member memberlist counts alive that has been silent for two
// heartbeats, and stops counting the heartbeats of one silent for three.
func (g *Group) checkSilent(now time.Time) {
	var stopped []string
	g.mu.Lock()
	for name, m := range g.members {
		silence := now.Sub(m.heard)
		if m.heard.IsZero() || silence <= 2*g.heartbeat {
			continue
		}
		if m.beating && silence > 3*g.heartbeat {
			stopped = append(stopped, name)
		}
		if m.inList && m.alive() && !m.checking && m.gossip.IsValid() {
			m.checking = true
			g.checks.Add(1)
			go g.check(name, m.life, m.gossip)
		}
	}
	g.mu.Unlock()
	for _, name := range stopped {
		g.update(name, "its heartbeats stopped after memberlist had dropped it", func(m *member) { m.beating = false })
	}
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
	g.update(name, dead, func(m *member) {
		m.checking = false
		if m.life != life {
			return
		}
		if dead == "" || m.heard.After(start) {
			m.heard = time.Now() // alive: the next check waits for another silence
			return
		}
		m.foundDead = life
	})
}

// heardHeartbeat notes a heartbeat from the member's current life, which is alive whatever a
// check found, and tells Config.Resumed when it ends a silence.
func (g *Group) heardHeartbeat(name, life string) {
	var resumed netip.Addr
	g.update(name, "heartbeat", func(m *member) {
		if m.life != life {
			return
		}
		now := time.Now()
		if !m.heard.IsZero() && now.Sub(m.heard) > 2*g.heartbeat {
			resumed = m.gossip.Addr()
		}
		m.heard, m.beating, m.foundDead = now, true, ""
	})
	if resumed.IsValid() && g.resumed != nil {
		g.resumed(resumed)
	}
}
