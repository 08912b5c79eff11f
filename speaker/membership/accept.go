package membership

import "time"

// The acceptance rule for heartbeats, kept pure so that testdata/accept pins it. A heartbeat
// counts only when it is from the life the sender gossips now, and a direct one only when it
// names the life of this process as its receiver: one recorded before this node restarted
// names the life before, and changes nothing. With keys set a direct heartbeat must also be
// numbered past the last one taken from that life, so one recorded and sent again within
// this life changes nothing either. Without keys the number is not compared: anyone can write
// a heartbeat then, and one forged with the highest number would mute the real sender for
// the rest of its life.

// heartbeat is a heartbeat as it was read.
type heartbeat struct {
	name, life string    // the sender and the life it names
	direct     bool      // a direct heartbeat (heartbeat.go); else a memberlist user message
	to         string    // a direct heartbeat's receiver: the life it is for
	seq        uint64    // a direct heartbeat's number
	at         time.Time // when it arrived
}

// sender is what this node knew of the heartbeat's sender when it arrived.
type sender struct {
	life  string    // the life it gossips; "": none known
	seq   uint64    // the number of the last direct heartbeat taken from that life
	heard time.Time // when the last heartbeat taken arrived
}

// Why a heartbeat was refused, as portico_memberlist_heartbeats_refused_total names it.
const (
	refusedUnreadable  = "unreadable"     // no key opens it, or it is not a heartbeat
	refusedSource      = "unknown-source" // from an address no member gossips from (heartsock.go)
	refusedOtherLife   = "other-life"     // from a life the sender does not gossip (or no known sender)
	refusedOtherSelf   = "receiver-restarted"
	refusedReplayed    = "replayed"   // numbered at or below the last one taken
	refusedWrongPath   = "wrong-path" // a user message from a life that sends direct heartbeats
	refusedOutOfOrder  = "out-of-order"
	refusedReasonCount = 7
)

// refusalReasons lists the reasons, in the order Group.HeartbeatsRefused reports them.
var refusalReasons = [refusedReasonCount]string{refusedUnreadable, refusedSource, refusedOtherLife, refusedOtherSelf,
	refusedReplayed, refusedWrongPath, refusedOutOfOrder}

// acceptHeartbeat judges h, read by the process of life self, from a sender as s says; sealed
// is whether heartbeats are sealed with keys. It returns "" and what is known of the sender
// after it when h counts, or why not.
func acceptHeartbeat(h heartbeat, s sender, self string, sealed bool) (refused string, after sender) {
	switch {
	case h.life != s.life || s.life == "":
		return refusedOtherLife, s
	case !h.direct && takesDirect(h.life):
		return refusedWrongPath, s // a member that takes direct heartbeats sends none this way
	case h.direct && h.to != self:
		return refusedOtherSelf, s
	case h.direct && sealed && h.seq <= s.seq:
		return refusedReplayed, s
	case h.at.Before(s.heard):
		return refusedOutOfOrder, s // read after a later one (the two readers: heartsock.go)
	}
	if h.direct && sealed {
		s.seq = h.seq
	}
	s.heard = h.at
	return "", s
}

// refuse counts a refused heartbeat.
func (g *Group) refuse(reason string) {
	for i, r := range refusalReasons {
		if r == reason {
			g.refused[i].Add(1)
		}
	}
}

// HeartbeatsRefused counts the heartbeats this node refused since it started, by reason
// (every reason listed, zero or not).
func (g *Group) HeartbeatsRefused() map[string]uint64 {
	out := make(map[string]uint64, len(refusalReasons))
	for i, r := range refusalReasons {
		out[r] = g.refused[i].Load()
	}
	return out
}
