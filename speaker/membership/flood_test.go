package membership

import (
	"crypto/rand"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/portico-lb/portico/internal/netlab"
)

// takenLog records the heartbeats a member took from one sender: number, arrival, read.
type takenLog struct {
	from string
	mu   sync.Mutex
	got  []takenBeat
}

type takenBeat struct {
	seq      uint64
	at, read time.Time
}

func (l *takenLog) took(h heartbeat, read time.Time) {
	if h.name != l.from {
		return
	}
	l.mu.Lock()
	l.got = append(l.got, takenBeat{h.seq, h.at, read})
	l.mu.Unlock()
}

// since returns what was taken from n on.
func (l *takenLog) since(n int) []takenBeat {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.got[n:])
}

func (l *takenLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.got)
}

// delays are, for each heartbeat the sender numbered from the first taken to the last, how long
// after it was sent (its arrival on loopback; interpolated between the taken ones around a lost
// one) the receiver had read it or a later one; and how many were lost.
func delays(got []takenBeat) (d []time.Duration, lost int) {
	for i := 1; i < len(got); i++ {
		prev, next := got[i-1], got[i]
		gap := next.seq - prev.seq
		for k := uint64(1); k <= gap; k++ {
			sent := prev.at.Add(next.at.Sub(prev.at) * time.Duration(k) / time.Duration(gap))
			d = append(d, next.read.Sub(sent))
		}
		lost += int(gap) - 1
	}
	return d, lost
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// flood sends datagrams of random bytes, half of them starting with heartbeatMagic, from
// 127.0.0.2 (no member's address) to port as fast as it can, until stop is closed.
func flood(t *testing.T, port int, stop chan struct{}) (sent *int64, done chan struct{}) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	must(t, err)
	must(t, unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 2}}))
	to := &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}
	sent, done = new(int64), make(chan struct{})
	go func() {
		defer close(done)
		defer unix.Close(fd)
		garbage := make([]byte, 120)
		_, _ = rand.Read(garbage)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			garbage[0], garbage[1], garbage[2] = byte(i%2)*heartbeatMagic, byte(i), byte(i>>8) // half look like heartbeats
			if unix.Sendto(fd, garbage, unix.MSG_DONTWAIT, to) == nil {
				*sent++
			}
		}
	}()
	return sent, done
}

// TestGarbageFloodDelaysNoHeartbeat: a host that is no member floods a's gossip port with
// garbage, half of it made to look like direct heartbeats (their first byte), for two seconds.
// a still takes every heartbeat b sends in that time (none lost, so it never finds b silent
// and asks b's kernel), because the garbage never shares the heartbeats' queue. The delay from
// each of b's heartbeats to a's reading it is logged with and without the flood (medians).
func TestGarbageFloodDelaysNoHeartbeat(t *testing.T) {
	log := &takenLog{from: "b"}
	a, b := startPair(t, func(c *Config) { c.took = log.took })
	netlab.WaitFor(t, "a takes 10 of b's heartbeats", 5*time.Second, func() bool { return log.count() >= 10 })
	_ = b
	window := 2 * time.Second
	quiet := log.count()
	<-time.After(window) // the measurement's window: there is nothing to wait for
	calm, calmLost := delays(log.since(quiet))

	stop := make(chan struct{})
	checks, refused, before := a.checks.Load(), a.HeartbeatsRefused()[refusedSource], log.count()
	sent, done := flood(t, a.Port(), stop)
	<-time.After(window) // the flood's length: the stimulus, not a wait for anything
	close(stop)
	<-done
	flooded, floodLost := delays(log.since(before))
	strays := a.HeartbeatsRefused()[refusedSource] - refused
	t.Logf("without the flood: %d of b's heartbeats, %d lost, delay to a's reading median %v; with %d datagrams of garbage in %v (%d looking like heartbeats, refused at the gossip socket): %d heartbeats, %d lost, delay median %v",
		len(calm), calmLost, median(calm).Round(time.Millisecond), *sent, window, strays, len(flooded), floodLost, median(flooded).Round(time.Millisecond))
	if floodLost > 0 || len(flooded) < 10 {
		t.Fatalf("a lost %d of b's heartbeats during the flood and took %d", floodLost, len(flooded))
	}
	if n := a.checks.Load() - checks; n > 0 {
		t.Fatalf("a found b silent and asked its kernel %d times during the flood", n)
	}
	if strays == 0 {
		t.Fatal("no garbage looking like heartbeats reached a: the test flooded nothing")
	}
}
