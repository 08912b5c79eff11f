package bfd

import (
	"fmt"
	"slices"
	"time"

	"github.com/portico-lb/portico/rules/bfdprofile"
)

// Config is what the local system asks of one session (rules/bfdprofile, which the speaker's
// plan fills without linking this package's sockets).
type Config = bfdprofile.Config

// Auth, Key and AuthType are a session's authentication (rules/bfdprofile).
type (
	Auth     = bfdprofile.Auth
	Key      = bfdprofile.Key
	AuthType = bfdprofile.AuthType
)

// The authentication types (RFC 5880 §4.1) Portico supports.
const (
	AuthNone                = bfdprofile.AuthNone
	AuthKeyedSHA1           = bfdprofile.AuthKeyedSHA1
	AuthMeticulousKeyedSHA1 = bfdprofile.AuthMeticulousKeyedSHA1
)

// Discard says why Receive dropped a packet: Reason is a short label for metrics
// (discriminator, authentication, admin-down), Detail the explanation for logs.
type Discard struct {
	Reason, Detail string
}

func (d *Discard) Error() string { return d.Reason + ": " + d.Detail }

func discard(reason, format string, args ...any) *Discard {
	return &Discard{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// Hops says how a session's packets travel: single hop or multihop (rules/bfdprofile).
type Hops = bfdprofile.Hops

// slowTx is the least transmit interval advertised while the session is not Up (RFC 5880 §6.8.3).
const slowTx = time.Second

// Transition is a state change and the diagnostic that explains it.
type Transition struct {
	From, To State
	Diag     Diag
}

// Output is what one input made the session do.
type Output struct {
	Send       []Packet    // to transmit now, in order
	Transition *Transition // nil: the state did not change
}

// Random is where a session's random choices come from: inputs, like the time.
type Random struct {
	// Jitter returns the fraction of the transmit interval to wait before the next periodic
	// packet: in [0.75, 1] (at most 0.9 when the detect multiplier is 1, RFC 5880 §6.8.7).
	Jitter func() float64
	// Discriminator returns a new local discriminator (random, non-zero, unique on this
	// system), taken each time the session forgets the peer's sequence number (auth.go).
	Discriminator func() uint32
}

// Session is one RFC 5880 asynchronous-mode session. It does no I/O and reads no clock: every
// input carries the time, and what is random comes from Random.
type Session struct {
	cfg    Config
	myDisc uint32
	random Random

	state        State
	diag         Diag
	remoteDisc   uint32
	remoteState  State
	remoteMinRx  time.Duration // bfd.RemoteMinRxInterval
	remoteTx     time.Duration // the peer's DesiredMinTx, for the detection time
	remoteMult   uint8
	txInUse      time.Duration // the desired TX in force (the old one until a poll ends)
	rxInUse      time.Duration // the required RX in force
	polling      bool
	pollTx       time.Duration // the values the poll sequence announces
	pollRx       time.Duration
	nextTx       time.Time // zero: nothing scheduled
	detectAt     time.Time // zero: not armed
	finalPending bool
	// restartHeard is when the peer's address last sent a fresh session's packet (Your
	// Discriminator 0, another My Discriminator) while this one was Init or Up.
	restartHeard time.Time
	// formerPeers are the last discriminators the peer had before its current one: a packet
	// of one of them is no new session of the peer's (it may be a recording).
	formerPeers [4]uint32

	xmitSeq    uint32    // bfd.XmitAuthSeq: the sequence number of the next packet sent
	rcvSeq     uint32    // bfd.RcvAuthSeq: that of the last authenticated packet received
	seqKnown   bool      // bfd.AuthSeqKnown
	lastAuthRx time.Time // when rcvSeq was received
}

// NewSession starts a session in Down with local discriminator myDisc (random, non-zero, unique
// on this system) and firstSeq as the first authentication sequence number (random, RFC 5880
// §6.8.1). The first packet is due at now unless the session is passive.
func NewSession(now time.Time, cfg Config, myDisc, firstSeq uint32, random Random) *Session {
	s := &Session{cfg: cfg, myDisc: myDisc, xmitSeq: firstSeq, random: random, state: Down, remoteState: Down,
		remoteMinRx: time.Microsecond, txInUse: max(cfg.DesiredMinTx, slowTx), rxInUse: cfg.RequiredMinRx}
	if !cfg.Passive {
		s.nextTx = now
	}
	return s
}

// State is the session's state.
func (s *Session) State() State { return s.state }

// Discriminator is the local discriminator.
func (s *Session) Discriminator() uint32 { return s.myDisc }

// Deadline is when Advance must next be called; zero when no timer is armed.
func (s *Session) Deadline() time.Time {
	switch {
	case s.nextTx.IsZero():
		return s.detectAt
	case s.detectAt.IsZero() || s.nextTx.Before(s.detectAt):
		return s.nextTx
	}
	return s.detectAt
}

// advertisedTx is the DesiredMinTx to announce: never under a second while not Up.
func (s *Session) advertisedTx(tx time.Duration) time.Duration {
	if s.state != Up {
		return max(tx, slowTx)
	}
	return tx
}

// txInterval is the period between periodic packets (RFC 5880 §6.8.7): the slower of what this
// side wants to send and what the peer can receive. A poll in progress may only make it faster.
func (s *Session) txInterval() time.Duration {
	tx := s.txInUse
	if s.polling {
		tx = min(tx, s.pollTx)
	}
	return max(tx, s.remoteMinRx)
}

// detectTime is the peer's multiplier times the slower of what this side can receive and what
// the peer sends (RFC 5880 §6.8.4). A poll in progress may only make it longer.
func (s *Session) detectTime() time.Duration {
	rx := s.rxInUse
	if s.polling {
		rx = max(rx, s.pollRx)
	}
	return time.Duration(s.remoteMult) * max(rx, s.remoteTx)
}

func (s *Session) sending() bool {
	// RFC 5880 §6.8.7: nothing while the peer can take nothing, and a passive side waits for the peer.
	return s.remoteMinRx > 0 && !(s.cfg.Passive && s.remoteDisc == 0)
}

// Receive processes a control packet from the peer (already checked by Unmarshal), applying
// the reception rules of RFC 5880 §6.8.6 that need the session. A packet they drop changes
// nothing and comes back as a Discard saying why.
func (s *Session) Receive(now time.Time, p Packet) (Output, *Discard) {
	s.forgetSeq(now)
	if d := s.notThePeers(now, p); d != nil {
		return Output{}, d
	}
	fresh, d := s.authenticate(now, p)
	if d != nil {
		return Output{}, d
	}
	if s.state == AdminDown {
		return Output{}, discard("admin-down", "the session is administratively down")
	}
	if !fresh {
		return s.heardUnproven(now, p), nil
	}
	s.bindPeer(p.MyDiscriminator)
	s.remoteState = p.State
	s.remoteMinRx, s.remoteTx, s.remoteMult = p.RequiredMinRx, p.DesiredMinTx, p.DetectMult
	if p.Final && s.polling {
		s.polling = false
		s.txInUse, s.rxInUse = s.pollTx, s.pollRx
	}
	var out Output
	was := s.state
	s.follow(p.State)
	s.detectAt = now.Add(s.detectTime())
	if s.state != was {
		out.Transition = &Transition{From: was, To: s.state, Diag: s.diag}
		s.nextTx = now // tell the peer at once
	}
	if p.Poll {
		s.finalPending = true
		s.nextTx = now
	}
	if s.nextTx.IsZero() && s.sending() {
		s.nextTx = now
	}
	out.Send = s.transmitDue(now)
	return out, nil
}

// notThePeers says why p, received at now, is not this session's peer's (nil: it may be).
func (s *Session) notThePeers(now time.Time, p Packet) *Discard {
	if p.YourDiscriminator != 0 && p.YourDiscriminator != s.myDisc {
		return discard("discriminator", "your discriminator %d is not this session's", p.YourDiscriminator)
	}
	// A packet with Your Discriminator 0 is matched by its source address and My Discriminator
	// (§6.8.6). Once the session has left Down, the peer's discriminator is fixed (§6.3: it
	// never changes during a session), so a packet naming another one is not the peer's: a
	// forged Down or AdminDown from the LAN that guessed neither discriminator changes nothing.
	// A peer that restarted with a new one is heard once the session times out to Down; one
	// of its former discriminators is no new session (it may be a recording).
	if (s.state == Init || s.state == Up) && p.MyDiscriminator != s.remoteDisc {
		if p.YourDiscriminator == 0 && !slices.Contains(s.formerPeers[:], p.MyDiscriminator) &&
			(s.cfg.Auth.Type == AuthNone || p.DigestValid(s.cfg.Auth.Key)) {
			s.restartHeard = now
		}
		return discard("discriminator", "my discriminator %d, the session's peer is %d", p.MyDiscriminator, s.remoteDisc)
	}
	return nil
}

// follow moves the session's state as the peer's state says (§6.8.6).
func (s *Session) follow(peer State) {
	switch {
	case peer == AdminDown:
		if s.state != Down {
			s.setState(Down, DiagNeighborDown)
		}
	case s.state == Down && peer == Down:
		s.setState(Init, DiagNone)
	case s.state == Down && peer == Init, s.state == Init && peer != Down:
		s.setState(Up, DiagNone)
	case s.state == Up && peer == Down:
		s.setState(Down, DiagNeighborDown)
	}
}

func (s *Session) setState(to State, diag Diag) {
	s.state, s.diag = to, diag
	s.stateChanged()
	switch to {
	case Up:
		// Leave the one-second rate for the configured one with a poll sequence (RFC 5880 §6.8.3).
		if s.cfg.DesiredMinTx != s.txInUse || s.cfg.RequiredMinRx != s.rxInUse {
			s.startPoll(s.cfg)
		}
	case Down:
		s.polling = false
		s.txInUse = max(s.cfg.DesiredMinTx, slowTx)
		s.rxInUse = s.cfg.RequiredMinRx
	}
}

func (s *Session) startPoll(cfg Config) {
	s.polling, s.pollTx, s.pollRx = true, s.advertisedTx(cfg.DesiredMinTx), cfg.RequiredMinRx
}

// Advance fires the timers due at now: the detection time (the session goes Down) and the
// periodic transmission.
func (s *Session) Advance(now time.Time) Output {
	s.forgetSeq(now)
	var out Output
	if !s.detectAt.IsZero() && !now.Before(s.detectAt) {
		// The old session fell silent while the peer's address was opening a new one (a router
		// such as bird makes a new BFD session for each new BGP session): the path works, the
		// neighbour dropped the session. Blaming the path would reset BGP for nothing.
		diag := DiagDetectionExpired
		if !s.restartHeard.IsZero() && now.Sub(s.restartHeard) < s.detectTime() {
			diag = DiagNeighborDown
		}
		s.detectAt, s.restartHeard = time.Time{}, time.Time{}
		s.bindPeer(0)
		s.remoteMinRx, s.remoteTx = time.Microsecond, 0
		if s.state == Init || s.state == Up {
			was := s.state
			s.setState(Down, diag)
			out.Transition = &Transition{From: was, To: Down, Diag: diag}
		}
		if s.cfg.Passive {
			s.nextTx = time.Time{}
		}
	}
	out.Send = s.transmitDue(now)
	return out
}

// Reconfigure changes the intervals, multiplier or passive role. Changed intervals on an Up
// session are announced with a poll sequence and take effect when the peer answers it.
func (s *Session) Reconfigure(now time.Time, cfg Config) Output {
	old := s.cfg
	s.cfg = cfg
	if s.state == Up && (cfg.DesiredMinTx != old.DesiredMinTx || cfg.RequiredMinRx != old.RequiredMinRx) {
		s.startPoll(cfg)
		s.nextTx = now
	} else if s.state != Up {
		s.txInUse, s.rxInUse = max(cfg.DesiredMinTx, slowTx), cfg.RequiredMinRx
	}
	if s.nextTx.IsZero() && s.sending() {
		s.nextTx = now
	}
	return Output{Send: s.transmitDue(now)}
}

// Shutdown puts the session in AdminDown and returns the packet telling the peer, so it takes
// the session down without blaming the path (RFC 5880 §6.8.16).
func (s *Session) Shutdown() Output {
	if s.state == AdminDown {
		return Output{}
	}
	was := s.state
	s.state, s.diag, s.polling, s.detectAt, s.nextTx = AdminDown, DiagAdminDown, false, time.Time{}, time.Time{}
	s.stateChanged()
	return Output{Send: []Packet{s.packet()}, Transition: &Transition{From: was, To: AdminDown, Diag: DiagAdminDown}}
}

// transmitDue sends the packet due at now, if any, and schedules the next one.
func (s *Session) transmitDue(now time.Time) []Packet {
	if s.nextTx.IsZero() || now.Before(s.nextTx) {
		return nil
	}
	if !s.sending() && !s.finalPending {
		s.nextTx = time.Time{}
		return nil
	}
	p := s.packet()
	s.finalPending = false
	s.nextTx = now.Add(time.Duration(float64(s.txInterval()) * s.random.Jitter()))
	if !s.sending() {
		s.nextTx = time.Time{}
	}
	return []Packet{p}
}

func (s *Session) packet() Packet {
	p := Packet{Diag: s.diag, State: s.state, DetectMult: s.cfg.DetectMult,
		MyDiscriminator: s.myDisc, YourDiscriminator: s.remoteDisc,
		DesiredMinTx: s.advertisedTx(s.cfg.DesiredMinTx), RequiredMinRx: s.cfg.RequiredMinRx}
	if s.finalPending {
		p.Final = true
	} else if s.polling {
		p.Poll = true
	}
	return s.sign(p)
}

// bindPeer makes d the peer's discriminator (0: none known), remembering the one it replaces.
func (s *Session) bindPeer(d uint32) {
	if s.remoteDisc != 0 && s.remoteDisc != d && !slices.Contains(s.formerPeers[:], s.remoteDisc) {
		copy(s.formerPeers[1:], s.formerPeers[:])
		s.formerPeers[0] = s.remoteDisc
	}
	s.remoteDisc = d
}
