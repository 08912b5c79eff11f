package netlab

import (
	"net/netip"
	"slices"
	"sync"
	"time"
)

// AskUntil broadcasts one request for ip and returns the MACs that answer within wait, as soon
// as enough have (0: all that answer within wait).
func (a *ARPAsker) AskUntil(ip netip.Addr, wait time.Duration, enough int) []string {
	a.Ask(ip)
	var macs []string
	a.Answers(time.Now().Add(wait), func(from netip.Addr, mac string, gratuitous bool) bool {
		if !gratuitous && from == ip && !slices.Contains(macs, mac) {
			macs = append(macs, mac)
		}
		return enough == 0 || len(macs) < enough
	})
	return macs
}

// ARPProbes asks for one address at a steady pace and counts the asks that the wanted MAC did
// not answer alone within a second.
type ARPProbes struct {
	once         sync.Once
	stop         chan struct{}
	done         chan struct{}
	mu           sync.Mutex
	sent, failed int
	slowest      time.Duration
}

// ProbeARP asks for ip through a every interval until Finish, which closes a; each ask not
// answered by want alone is logged with logf (a test's Logf).
func ProbeARP(logf func(format string, args ...any), a *ARPAsker, ip netip.Addr, want string, every time.Duration) *ARPProbes {
	p := &ARPProbes{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer a.Close()
		// The pace of the asks, not a wait for anything.
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
			asked := time.Now()
			macs := a.AskUntil(ip, time.Second, 1)
			took := time.Since(asked)
			p.mu.Lock()
			p.sent++
			if !slices.Equal(macs, []string{want}) {
				p.failed++
				logf("ARP ask for %s at %s: answered by %v, want %s", ip, asked.Format("15:04:05.000"), macs, want)
			}
			p.slowest = max(p.slowest, took)
			p.mu.Unlock()
		}
	}()
	return p
}

// Finish stops asking and returns the asks sent, those want did not answer, and the slowest answer.
func (p *ARPProbes) Finish() (sent, failed int, slowest time.Duration) {
	p.once.Do(func() { close(p.stop) })
	<-p.done
	return p.Counts()
}

// Counts are the asks sent so far, those want did not answer, and the slowest answer.
func (p *ARPProbes) Counts() (sent, failed int, slowest time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent, p.failed, p.slowest
}
