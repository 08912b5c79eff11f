package membership

import (
	"net"
	"testing"
)

// TestKeyRotation: three members rotate from one key to another in three steps (accept the
// new key, make it primary, drop the old one) and stay one group at every step; afterwards
// a newcomer holding only the new key joins and one holding only the old key cannot.
func TestKeyRotation(t *testing.T) {
	oldKey, newKey := []byte("0123456789abcdef"), []byte("fedcba9876543210fedcba98")
	names := []string{"a", "b", "c"}
	var group []*Group
	for _, n := range names {
		g := startWith(t, Config{Name: n, BindAddr: "127.0.0.1", Keys: Keys{Primary: oldKey}})
		if len(group) > 0 {
			must(t, g.Join([]string{HostPort("127.0.0.1", group[0].Port())}))
		}
		group = append(group, g)
	}
	for _, g := range group {
		waitAlive(t, g, names)
	}
	for _, step := range []Keys{
		{Primary: oldKey, Accepted: [][]byte{newKey}},
		{Primary: newKey, Accepted: [][]byte{oldKey}},
		{Primary: newKey},
	} {
		// One member at a time, as a rollout would: every member can still reach every other.
		for _, g := range group {
			must(t, g.SetKeys(step))
			for _, from := range group {
				for _, to := range group {
					if from != to && !reaches(from, to) {
						t.Fatalf("after a member took a step: no answer over encrypted gossip from one member to another")
					}
				}
			}
		}
	}
	if k := group[0].Keys(); string(k.Primary) != string(newKey) || len(k.Accepted) != 0 {
		t.Fatalf("keys after the rotation: %d accepted besides the primary", len(k.Accepted))
	}
	late := startWith(t, Config{Name: "late", BindAddr: "127.0.0.1", Keys: Keys{Primary: newKey}})
	must(t, late.Join([]string{HostPort("127.0.0.1", group[1].Port())}))
	waitAlive(t, group[0], []string{"a", "b", "c", "late"})
	stale := startWith(t, Config{Name: "stale", BindAddr: "127.0.0.1", Keys: Keys{Primary: oldKey}})
	if err := stale.Join([]string{HostPort("127.0.0.1", group[2].Port())}); err == nil {
		t.Fatal("a member holding only the removed key joined")
	}
}

// TestSetKeysRefused: a bad key set changes nothing, and clear-text gossip cannot switch to
// encrypted without a restart.
func TestSetKeysRefused(t *testing.T) {
	key := []byte("0123456789abcdef")
	g := startWith(t, Config{Name: "a", BindAddr: "127.0.0.1", Keys: Keys{Primary: key}})
	for _, bad := range []Keys{{}, {Primary: []byte("short")}, {Primary: key, Accepted: [][]byte{[]byte("short")}}} {
		if err := g.SetKeys(bad); err == nil {
			t.Errorf("SetKeys accepted %d-byte primary, %d accepted", len(bad.Primary), len(bad.Accepted))
		}
	}
	if k := g.Keys(); string(k.Primary) != string(key) || len(k.Accepted) != 0 {
		t.Fatal("a refused key set changed the keys")
	}
	clear := startWith(t, Config{Name: "b", BindAddr: "127.0.0.1"})
	if err := clear.SetKeys(Keys{Primary: key}); err == nil {
		t.Fatal("a group started in clear took a key")
	}
}

// reaches reports whether a ping from one member is answered by another. Both ends encrypt
// with their primary key, so the answer shows each reads the other's. UDP may drop one, so up
// to five tries.
func reaches(from, to *Group) bool {
	n := to.ml.LocalNode()
	for range 5 {
		if _, err := from.ml.Ping(n.Name, &net.UDPAddr{IP: n.Addr, Port: int(n.Port)}); err == nil {
			return true
		}
	}
	return false
}
