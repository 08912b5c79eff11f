package membership

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/portico-lb/portico/internal/netlab"
)

// BenchmarkIdleGroup measures what an idle group costs each member, at several sizes: the
// packets each sends a second, and the CPU of the whole process (every member runs in it, on
// loopback) divided among them. It ignores b.N.
func BenchmarkIdleGroup(b *testing.B) {
	for _, n := range []int{3, 10, 30, 100} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			var gs []*Group
			for i := range n {
				g, err := Start(Config{Name: fmt.Sprintf("m%03d", i), BindAddr: "127.0.0.1", Keys: Keys{Primary: []byte("0123456789abcdef")},
					Detection: DefaultDetection})
				if err != nil {
					b.Fatal(err)
				}
				defer func() { _ = g.Leave(time.Second) }()
				if i > 0 {
					if err := g.Join([]string{HostPort("127.0.0.1", gs[0].Port())}); err != nil {
						b.Fatal(err)
					}
				}
				gs = append(gs, g)
			}
			netlab.WaitFor(b, "every member sees every other", time.Minute, func() bool {
				for _, g := range gs {
					if len(g.Alive()) != n {
						return false
					}
				}
				return true
			})
			sent := func() (s int64) {
				for _, g := range gs {
					s += g.net.sent.Load()
				}
				return s
			}
			cpu := func() time.Duration {
				var ru syscall.Rusage
				_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
				return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			}
			window := 10 * time.Second
			s0, c0, t0 := sent(), cpu(), time.Now()
			time.Sleep(window) // the measurement window: there is nothing to wait for
			secs := time.Since(t0).Seconds()
			b.ReportMetric(float64(sent()-s0)/float64(n)/secs, "packets/s/member")
			b.ReportMetric(100*(cpu()-c0).Seconds()/float64(n)/secs, "%core/member")
		})
	}
}
