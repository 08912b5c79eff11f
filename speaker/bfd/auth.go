package bfd

import "time"

// authenticate applies RFC 5880 §6.7.4 to a received packet: the A bit must match the
// session's configuration, the type and key ID its own, the digest its key, and the sequence
// number must lie in the window after the last one accepted. An accepted packet's sequence
// number becomes the new start of the window.
func (s *Session) authenticate(now time.Time, p Packet) *Discard {
	want, got := s.cfg.Auth, p.Auth
	switch {
	case want.Type == AuthNone && got.Type == AuthNone:
		return nil
	case want.Type == AuthNone:
		return discard("authentication", "the packet is authenticated (%v), the session has no authentication", got.Type)
	case got.Type == AuthNone:
		return discard("authentication", "the packet is not authenticated, the session requires %v", want.Type)
	case got.Type != want.Type:
		return discard("authentication", "authentication %v, the session requires %v", got.Type, want.Type)
	case got.KeyID != want.KeyID:
		return discard("authentication", "key ID %d, the session's is %d", got.KeyID, want.KeyID)
	}
	// bfd.AuthSeqKnown lapses after twice the detection time without a packet (§6.8.1), so a
	// peer that restarted with a new sequence number is heard again.
	if s.seqKnown && now.Sub(s.lastAuthRx) >= 2*s.detectTime() {
		s.seqKnown = false
	}
	if s.seqKnown {
		// Keyed SHA1 accepts a repeated number, Meticulous Keyed SHA1 needs a higher one; both
		// accept up to 3 × Detect Mult ahead (packets lost in between), in 32-bit modular order.
		first := s.rcvSeq
		if want.Type == AuthMeticulousKeyedSHA1 {
			first++
		}
		if got.Sequence-first > s.rcvSeq+3*uint32(p.DetectMult)-first {
			return discard("authentication", "sequence number %d outside %d..%d", got.Sequence, first, s.rcvSeq+3*uint32(p.DetectMult))
		}
	}
	if !p.DigestValid(want.Key) {
		return discard("authentication", "the digest does not match key ID %d", want.KeyID)
	}
	s.rcvSeq, s.seqKnown, s.lastAuthRx = got.Sequence, true, now
	return nil
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
