package bfd

import "time"

// authenticate applies RFC 5880 §6.7.4 to a received packet: the A bit must match the
// session's configuration, the type and key ID its own, the digest its key, and the sequence
// number must lie in the window after the last one accepted (§6.7.3). An accepted packet's
// sequence number becomes the new start of the window.
//
// The window needs a sequence number to start from, and there is none when the session starts
// or has forgotten it (forgetSeq). RFC 5880 takes the next packet's then, and so would take a
// recording: a replayed Init would bring the session Up with no peer there. Here a packet is
// fresh only if it names this session's discriminator, which forgetSeq renews, so nothing
// recorded before can: only such a packet sets the window. Another packet signed with the key
// (Your Discriminator 0) is not fresh: it may tell whom to address (heardUnproven), no more.
func (s *Session) authenticate(now time.Time, p Packet) (fresh bool, d *Discard) {
	want, got := s.cfg.Auth, p.Auth
	switch {
	case want.Type == AuthNone && got.Type == AuthNone:
		return true, nil
	case want.Type == AuthNone:
		return false, discard("authentication", "the packet is authenticated (%v), the session has no authentication", got.Type)
	case got.Type == AuthNone:
		return false, discard("authentication", "the packet is not authenticated, the session requires %v", want.Type)
	case got.Type != want.Type:
		return false, discard("authentication", "authentication %v, the session requires %v", got.Type, want.Type)
	case got.KeyID != want.KeyID:
		return false, discard("authentication", "key ID %d, the session's is %d", got.KeyID, want.KeyID)
	}
	if s.seqKnown {
		// Keyed SHA1 accepts a repeated number, Meticulous Keyed SHA1 needs a higher one; both
		// accept up to 3 × Detect Mult ahead (packets lost in between), in 32-bit modular order.
		first := s.rcvSeq
		if want.Type == AuthMeticulousKeyedSHA1 {
			first++
		}
		if got.Sequence-first > s.rcvSeq+3*uint32(p.DetectMult)-first {
			return false, discard("authentication", "sequence number %d outside %d..%d", got.Sequence, first, s.rcvSeq+3*uint32(p.DetectMult))
		}
	}
	if !p.DigestValid(want.Key) {
		return false, discard("authentication", "the digest does not match key ID %d", want.KeyID)
	}
	if !s.seqKnown && p.YourDiscriminator != s.myDisc {
		return false, nil
	}
	s.rcvSeq, s.seqKnown, s.lastAuthRx = got.Sequence, true, now
	return true, nil
}

// forgetSeq forgets the peer's sequence number after twice the detection time without an
// authenticated packet (§6.8.1), so a peer that restarted with a new numbering is heard again,
// and takes a new discriminator with it: what names the old one was sent before, and a packet
// must name the new one to set the window again (authenticate). The session has been Down for
// a detection time by then, and the peer learns the new discriminator from its next packet.
func (s *Session) forgetSeq(now time.Time) {
	if s.seqKnown && now.Sub(s.lastAuthRx) >= 2*s.detectTime() {
		s.seqKnown = false
		s.myDisc = s.random.Discriminator()
	}
}

// heardUnproven takes a packet signed with the key that may be a recording (authenticate): a
// session in Down addresses its next packets to that discriminator, so a live peer can answer
// naming this session's, and a passive one starts sending. Nothing else changes: no state, no
// timer, no window.
func (s *Session) heardUnproven(now time.Time, p Packet) Output {
	if s.state == Down {
		s.bindPeer(p.MyDiscriminator)
	}
	if s.nextTx.IsZero() && s.sending() {
		s.nextTx = now
	}
	return Output{Send: s.transmitDue(now)}
}

// sign adds the session's authentication section to an outgoing packet. Meticulous Keyed SHA1
// numbers every packet; Keyed SHA1 numbers each state (stateChanged), so a packet recorded in an
// earlier state, a Down in particular, falls behind the peer's window and cannot be replayed.
func (s *Session) sign(p Packet) Packet {
	a := s.cfg.Auth
	if a.Type == AuthNone {
		return p
	}
	p.Auth = AuthSection{Type: a.Type, KeyID: a.KeyID, Sequence: s.xmitSeq}
	if a.Type == AuthMeticulousKeyedSHA1 {
		s.xmitSeq++
	}
	return p.Signed(a.Key)
}

// stateChanged advances the Keyed SHA1 sequence number: see sign.
func (s *Session) stateChanged() {
	if s.cfg.Auth.Type == AuthKeyedSHA1 {
		s.xmitSeq++
	}
}
