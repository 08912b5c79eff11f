package membership

import (
	"testing"
	"time"
)

// TestSend: a message sent to a member reaches its Config.Message as sent, over the encrypted
// stream; one to a name that is no member is an error.
func TestSend(t *testing.T) {
	key := []byte("0123456789abcdef")
	got := make(chan []byte, 1)
	a := startWith(t, Config{Name: "a", BindAddr: "127.0.0.1", Keys: Keys{Primary: key}, Message: func(msg []byte) { got <- msg }})
	b := start(t, "b", 0, key)
	if err := b.Join([]string{HostPort("127.0.0.1", a.Port())}); err != nil {
		t.Fatal(err)
	}
	waitAlive(t, b, []string{"a", "b"})
	big := make([]byte, 300_000) // a share of thousands of flows
	big[len(big)-1] = 'x'
	if err := b.Send("a", big); err != nil {
		t.Fatal(err)
	}
	select {
	case msg := <-got:
		if len(msg) != len(big) || msg[len(msg)-1] != 'x' {
			t.Fatalf("a got %d bytes, want the %d sent", len(msg), len(big))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a got nothing within 5 s")
	}
	if err := b.Send("c", []byte("hello")); err == nil {
		t.Fatal("sending to no member succeeded")
	}
}
