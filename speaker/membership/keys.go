package membership

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/hashicorp/memberlist"
)

// Keys encrypt the gossip: Primary encrypts what this node sends, and every key (Primary and
// Accepted) decrypts what it receives. Rotating through a second key (add it as accepted,
// make it primary, drop the old one) therefore never leaves two members unable to read each
// other, as long as each step has reached every member before the next.
type Keys struct {
	Primary  []byte
	Accepted [][]byte
}

// None reports whether there is no key at all (gossip in clear).
func (k Keys) None() bool { return len(k.Primary) == 0 && len(k.Accepted) == 0 }

// all lists every key, Primary first, without repeats.
func (k Keys) all() [][]byte {
	out := [][]byte{k.Primary}
	for _, a := range k.Accepted {
		if !slices.ContainsFunc(out, func(b []byte) bool { return bytes.Equal(a, b) }) {
			out = append(out, a)
		}
	}
	return out
}

// Count is how many different keys there are.
func (k Keys) Count() int {
	if k.None() {
		return 0
	}
	return len(k.all())
}

// Same reports whether k and o have the same primary and decrypt with the same keys.
func (k Keys) Same(o Keys) bool {
	if !bytes.Equal(k.Primary, o.Primary) || k.Count() != o.Count() {
		return false
	}
	for _, key := range k.all() {
		if !slices.ContainsFunc(o.all(), func(b []byte) bool { return bytes.Equal(key, b) }) {
			return false
		}
	}
	return true
}

// Validate checks that there is a primary key and that every key is 16, 24 or 32 bytes (AES).
func (k Keys) Validate() error {
	if len(k.Primary) == 0 {
		return fmt.Errorf("membership: no primary encryption key")
	}
	for i, key := range k.all() {
		if err := memberlist.ValidateKey(key); err != nil {
			return fmt.Errorf("membership: encryption key %d of %d is %d bytes, want 16, 24 or 32", i+1, len(k.all()), len(key))
		}
	}
	return nil
}

func (k Keys) keyring() (*memberlist.Keyring, error) {
	if err := k.Validate(); err != nil {
		return nil, err
	}
	return memberlist.NewKeyring(k.all(), k.Primary)
}

// SetKeys replaces the keys of a running group: it adds the new keys, switches the primary,
// then removes the keys no longer listed, so no message in between is unreadable to this node.
// A group started in clear cannot start encrypting (nor the reverse): that needs a restart.
func (g *Group) SetKeys(k Keys) error {
	ring := g.keyring
	if ring == nil {
		return fmt.Errorf("membership: gossip was started in clear; encrypting it needs a restart")
	}
	if err := k.Validate(); err != nil {
		return err
	}
	want := k.all()
	for _, key := range want {
		if err := ring.AddKey(key); err != nil {
			return fmt.Errorf("membership: %w", err)
		}
	}
	if err := ring.UseKey(k.Primary); err != nil {
		return fmt.Errorf("membership: %w", err)
	}
	for _, key := range slices.Clone(ring.GetKeys()) {
		if !slices.ContainsFunc(want, func(w []byte) bool { return bytes.Equal(key, w) }) {
			if err := ring.RemoveKey(key); err != nil {
				return fmt.Errorf("membership: %w", err)
			}
		}
	}
	return nil
}

// Keys returns the keys in use now.
func (g *Group) Keys() Keys {
	if g.keyring == nil {
		return Keys{}
	}
	all := g.keyring.GetKeys()
	return Keys{Primary: all[0], Accepted: slices.Clone(all[1:])}
}
