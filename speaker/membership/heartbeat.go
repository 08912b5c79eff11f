package membership

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"slices"
	"sync"
)

// Direct heartbeats. A heartbeat sent as a memberlist user message woke three goroutines
// where it arrived (the transport's reader, memberlist's packet handler, its hand-off to the
// delegate) and each wake cost the idle speaker a thread switch or more: at 40 heartbeats a
// second that was most of its CPU. A direct heartbeat goes out on the gossip socket in a
// packet of its own, and the transport's reader, which tells it from memberlist's packets by
// its first byte, hands it to the fast path itself.
//
// With keys set it is sealed with the primary key (AES-GCM, as memberlist seals the gossip)
// and opened with any key, so no host without a key can forge one. It names the life of the
// member it is for, so one recorded before that member restarted is ignored there, and it
// carries a sequence number that only grows within the sender's life, so one recorded and sent
// again later is ignored too (the rule: accept.go).
//
// Members that started before direct heartbeats named their receiver publish a life without
// the mark (directMark) and get theirs as memberlist user messages, as they send them to such
// a member: a group in a rolling update keeps its fast path both ways.

// heartbeatMagic is a direct heartbeat's first byte. memberlist's packets start with a
// message type (below 16, or 244 before a label) or, sealed, the encryption version (0 or 1).
const heartbeatMagic byte = 0xb7

// directMark ends the life of a member that takes direct heartbeats naming its life, after its
// random bytes. Older members' lives end with 'd' (direct heartbeats that named no receiver)
// or are the random bytes alone.
const directMark byte = 'r'

// lifeRandom is how many random bytes a life has.
const lifeRandom = 8

// takesDirect reports whether the member of that life takes direct heartbeats.
func takesDirect(life string) bool {
	return len(life) == lifeRandom+1 && life[lifeRandom] == directMark
}

// heartbeatBody is a direct heartbeat's content: its sequence number, the life of the member
// it is for (after its length), the sender's name and its life.
func heartbeatBody(seq uint64, to, name string, life []byte) []byte {
	b := binary.BigEndian.AppendUint64(nil, seq)
	b = append(append(b, byte(len(to))), to...)
	b = append(append(b, name...), 0)
	return append(b, life...)
}

// parseHeartbeatBody undoes heartbeatBody; ok is false for anything else.
func parseHeartbeatBody(b []byte) (h heartbeat, ok bool) {
	if len(b) < 9 || len(b) < 9+int(b[8]) {
		return heartbeat{}, false
	}
	to := b[9 : 9+int(b[8])]
	n, l, ok := bytes.Cut(b[9+len(to):], []byte{0})
	if !ok || len(n) == 0 || len(l) == 0 {
		return heartbeat{}, false
	}
	return heartbeat{seq: binary.BigEndian.Uint64(b), to: string(to), name: string(n), life: string(l), direct: true}, true
}

// sealer seals and opens direct heartbeats with the group's keys; with none it leaves them
// in clear. It keeps one cipher per key, made again when the keys change (SetKeys).
type sealer struct {
	keys func() [][]byte // primary first; nil: no keys

	mu      sync.Mutex
	made    [][]byte
	ciphers []cipher.AEAD
}

// current returns one cipher per key, primary first.
func (s *sealer) current() ([]cipher.AEAD, error) {
	keys := s.keys()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !slices.EqualFunc(keys, s.made, bytes.Equal) {
		ciphers := make([]cipher.AEAD, 0, len(keys))
		for _, key := range keys {
			block, err := aes.NewCipher(key)
			if err != nil {
				return nil, err
			}
			gcm, err := cipher.NewGCM(block)
			if err != nil {
				return nil, err
			}
			ciphers = append(ciphers, gcm)
		}
		s.made, s.ciphers = keys, ciphers
	}
	return s.ciphers, nil
}

// seal makes the packet that carries body.
func (s *sealer) seal(body []byte) ([]byte, error) {
	packet := []byte{heartbeatMagic}
	if s.keys == nil {
		return append(packet, body...), nil
	}
	ciphers, err := s.current()
	if err != nil || len(ciphers) == 0 {
		return nil, err
	}
	primary := ciphers[0]
	nonce := make([]byte, primary.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	packet = append(packet, nonce...)
	return primary.Seal(packet, nonce, body, packet[:1]), nil
}

// open returns the body of a packet that seal made, or false for anything that no key opens.
func (s *sealer) open(packet []byte) ([]byte, bool) {
	if len(packet) == 0 || packet[0] != heartbeatMagic {
		return nil, false
	}
	if s.keys == nil {
		return packet[1:], true
	}
	ciphers, err := s.current()
	if err != nil {
		return nil, false
	}
	for _, c := range ciphers {
		if len(packet) < 1+c.NonceSize()+c.Overhead() {
			continue
		}
		nonce, sealed := packet[1:1+c.NonceSize()], packet[1+c.NonceSize():]
		if body, err := c.Open(nil, nonce, sealed, packet[:1]); err == nil {
			return body, true
		}
	}
	return nil, false
}
