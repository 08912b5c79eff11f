package e2e

import (
	"net/netip"
	"slices"
	"sync"
	"time"
)

// outageMonitor asks for each address in turn, all the time, and keeps the longest time an
// address went without any answer and the number of asks two or more nodes answered.
type outageMonitor struct {
	mu      sync.Mutex
	last    map[netip.Addr]time.Time
	longest time.Duration
	worst   netip.Addr
	doubles map[netip.Addr]int
	stop    chan struct{}
	done    chan struct{}
}

func (e *l2Env) monitorOutages(ips []netip.Addr) *outageMonitor {
	m := &outageMonitor{last: map[netip.Addr]time.Time{}, doubles: map[netip.Addr]int{}, stop: make(chan struct{}), done: make(chan struct{})}
	now := time.Now()
	for _, ip := range ips {
		m.last[ip] = now
	}
	prober := e.arpProber()
	go func() {
		defer close(m.done)
		defer prober.close()
		for {
			for _, ip := range ips {
				select {
				case <-m.stop:
					return
				default:
				}
				answers := len(prober.ask(ip, 30*time.Millisecond))
				m.mu.Lock()
				if gap := time.Since(m.last[ip]); gap > m.longest {
					m.longest, m.worst = gap, ip
				}
				if answers > 0 {
					m.last[ip] = time.Now()
				}
				if answers > 1 {
					m.doubles[ip]++
				}
				m.mu.Unlock()
			}
		}
	}()
	return m
}

// finish stops asking and returns the longest outage and its address.
func (m *outageMonitor) finish() (time.Duration, netip.Addr) {
	close(m.stop)
	<-m.done
	return m.longest, m.worst
}

// answeredTwice returns, after finish, how many asks for each address two nodes answered.
func (m *outageMonitor) answeredTwice() map[netip.Addr]int { return m.doubles }

// answeredOnlyBy reports whether the one MAC answering ip is want's.
func (e *l2Env) answeredOnlyBy(ip netip.Addr, want string) bool {
	return slices.Equal(e.arpingMACs(ip, 1), []string{e.macOf(want)})
}
