package membership

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/portico-lb/portico/internal/netlab"
)

// claims records what Admit was asked, and admits a name only from its expected address.
type claims struct {
	expect map[string]netip.Addr
	mu     sync.Mutex
	seen   map[string]netip.Addr
	asked  map[string]int // how often each name's claim came
}

func (c *claims) admit(name string, addr netip.Addr) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[name] = addr
	c.asked[name]++
	if want, ok := c.expect[name]; !ok || want != addr {
		return fmt.Errorf("%s is not at %s", name, addr)
	}
	return nil
}

func (c *claims) sawFrom(name string, addr netip.Addr) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[name] == addr
}

func (c *claims) times(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.asked[name]
}

// TestAdmitRefusesClaimedName: a member claiming a name from an address Admit does not
// accept never becomes alive, whether it joins or is introduced through a member that
// admitted it; an honest member beside it is admitted.
func TestAdmitRefusesClaimedName(t *testing.T) {
	lo1, lo2 := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	c := &claims{expect: map[string]netip.Addr{"honest": lo1, "late": lo1, "b": lo2}, seen: map[string]netip.Addr{}, asked: map[string]int{}}
	a := startWith(t, Config{Name: "a", BindAddr: "127.0.0.1", Admit: c.admit})
	honest := startWith(t, Config{Name: "honest", BindAddr: "127.0.0.1"})
	liar := startWith(t, Config{Name: "b", BindAddr: "127.0.0.1"}) // b belongs at 127.0.0.2
	must(t, honest.Join([]string{HostPort("127.0.0.1", a.Port())}))
	waitAlive(t, a, []string{"a", "honest"})
	// Directly, and through honest, which admits anyone and gossips liar on.
	if err := liar.Join([]string{HostPort("127.0.0.1", a.Port()), HostPort("127.0.0.1", honest.Port())}); err != nil {
		t.Fatal(err)
	}
	waitAlive(t, liar, []string{"a", "b", "honest"})
	waitAlive(t, honest, []string{"a", "b", "honest"})
	netlab.WaitFor(t, "a asked about b's claim", 5*time.Second, func() bool { return c.sawFrom("b", lo1) })
	// b's claim comes again: a newcomer that learned of b through honest pushes its whole
	// state to a when it joins there. a admits the newcomer and still refuses b.
	asked := c.times("b")
	late := startWith(t, Config{Name: "late", BindAddr: "127.0.0.1"})
	must(t, late.Join([]string{HostPort("127.0.0.1", honest.Port())}))
	waitAlive(t, late, []string{"a", "b", "honest", "late"})
	must(t, late.Join([]string{HostPort("127.0.0.1", a.Port())}))
	netlab.WaitFor(t, "a asked about b's claim again", 5*time.Second, func() bool { return c.times("b") > asked })
	waitAlive(t, a, []string{"a", "honest", "late"})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
