package membership

import "testing"

// TestGoodbyeIsHeardBeforeTheGossip: a member's goodbye alone (no memberlist leave yet) makes the
// others see it gone while memberlist still counts it alive; a goodbye from an earlier life of
// the member changes nothing.
func TestGoodbyeIsHeardBeforeTheGossip(t *testing.T) {
	key := Keys{Primary: []byte("0123456789abcdef")}
	a := startWith(t, Config{Name: "a", BindAddr: "127.0.0.1", Keys: key})
	b := startWith(t, Config{Name: "b", BindAddr: "127.0.0.1", Keys: key})
	if err := b.Join([]string{HostPort("127.0.0.1", a.Port())}); err != nil {
		t.Fatal(err)
	}
	waitAlive(t, a, []string{"a", "b"})

	a.heardGoodbye("b", "an earlier life")
	if !a.IsAlive("b") {
		t.Fatal("a goodbye from another life of b marked b gone")
	}

	b.sayGoodbye()
	waitAlive(t, a, []string{"a"})
	if !listed(a, "b") {
		t.Fatal("memberlist already dropped b: the test did not isolate the goodbye")
	}
	if ch := lastChange(t, a, "b"); ch.Joined || ch.How != "goodbye" {
		t.Fatalf("b's leaving was told as %+v, want the goodbye", ch)
	}
}

func TestParseMessage(t *testing.T) {
	name, life, ok := parseMessage(goodbyePrefix, message(goodbyePrefix, "node-a", []byte{1, 2}))
	if !ok || name != "node-a" || life != "\x01\x02" {
		t.Fatalf("round trip: %q %q %v", name, life, ok)
	}
	if _, _, ok := parseMessage(heartbeatPrefix, message(goodbyePrefix, "node-a", []byte{1})); ok {
		t.Error("a goodbye parsed as a heartbeat")
	}
	for _, bad := range []string{"", "portico-goodbye\x00", "portico-goodbye\x00node-a", "portico-goodbye\x00\x00x", "hello"} {
		if _, _, ok := parseMessage(goodbyePrefix, []byte(bad)); ok {
			t.Errorf("parsed %q", bad)
		}
	}
}
