package membership

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/portico-lb/portico/internal/netlab"
)

func start(t *testing.T, name string, port int, key []byte) *Group {
	t.Helper()
	return startWith(t, Config{Name: name, BindAddr: "127.0.0.1", BindPort: port, Keys: Keys{Primary: key}})
}

// startWith starts cfg with the default timing (port 0: a free one).
func startWith(t *testing.T, cfg Config) *Group {
	t.Helper()
	cfg.Detection = DefaultDetection
	g, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Leave(100 * time.Millisecond) })
	return g
}

func waitAlive(t *testing.T, g *Group, want []string) {
	t.Helper()
	netlab.WaitFor(t, fmt.Sprintf("alive members %v", want), 5*time.Second, func() bool { return slices.Equal(g.Alive(), want) })
}

// TestJoinAndLeave: two members on loopback find each other, and a leave is seen by the other
// as a change, without waiting for failure detection.
func TestJoinAndLeave(t *testing.T) {
	key := []byte("0123456789abcdef")
	a := start(t, "a", 17946, key)
	b := start(t, "b", 17947, key)
	if err := b.Join([]string{HostPort("127.0.0.1", 17946)}); err != nil {
		t.Fatal(err)
	}
	waitAlive(t, a, []string{"a", "b"})
	if err := b.Leave(time.Second); err != nil {
		t.Fatal(err)
	}
	waitAlive(t, a, []string{"a"})
	for {
		select {
		case ch := <-a.Changes():
			if ch.Name == "b" && !ch.Joined {
				return
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no leave change for b")
		}
	}
}

// TestWrongKeyCannotJoin: gossip encrypted with another key is refused.
func TestWrongKeyCannotJoin(t *testing.T) {
	start(t, "a", 17948, []byte("0123456789abcdef"))
	b := start(t, "b", 17949, []byte("fedcba9876543210"))
	if err := b.Join([]string{HostPort("127.0.0.1", 17948)}); err == nil {
		t.Fatal("joined with the wrong key")
	}
}

func TestBadConfig(t *testing.T) {
	for _, cfg := range []Config{
		{Name: "x", BindAddr: "127.0.0.1", BindPort: 17950, Keys: Keys{Primary: []byte("short")}, Detection: DefaultDetection},
		{Name: "x", BindAddr: "127.0.0.1", BindPort: 17950, Detection: Detection{ProbeInterval: time.Second, ProbeTimeout: 2 * time.Second, SuspicionMult: 2}},
		{Name: "x", BindAddr: "127.0.0.1", BindPort: 17950, Detection: Detection{ProbeInterval: time.Second, ProbeTimeout: time.Millisecond}},
		{Name: "x", BindAddr: "127.0.0.1", BindPort: 17950, Keys: Keys{Accepted: [][]byte{[]byte("0123456789abcdef")}}, Detection: DefaultDetection},
		{Name: "x", BindAddr: "127.0.0.1", BindPort: 17950, Keys: Keys{Primary: []byte("0123456789abcdef"), Accepted: [][]byte{[]byte("short")}}, Detection: DefaultDetection},
	} {
		if g, err := Start(cfg); err == nil {
			_ = g.Leave(0)
			t.Errorf("Start(%+v) succeeded", cfg.Detection)
		}
	}
}
