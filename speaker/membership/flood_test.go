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

// asksForSilences is the most kernel asks the sender's own silences allow: a receiver asks
// once its last heartbeat from the sender arrived more than two heartbeats ago, and again two
// heartbeats after each ask, so a gap of g between arrivals at its socket (the kernel's stamps,
// which do not move when the receiver reads late), and the one from the last arrival to end,
// allow ⌈g / (2 heartbeats)⌉ each when g is over two heartbeats. A sender that sends late (its
// goroutine starved of CPU: the flood runs in the same process) makes such gaps; garbage that
// delays the receiver's reading of heartbeats that did arrive makes none.
func asksForSilences(got []takenBeat, end time.Time, heartbeat time.Duration) (asks int, longest time.Duration) {
	for i := 1; i <= len(got); i++ {
		next := end
		if i < len(got) {
			next = got[i].at
		}
		gap := next.Sub(got[i-1].at)
		longest = max(longest, gap)
		if gap > 2*heartbeat {
			asks += int((gap + 2*heartbeat - 1) / (2 * heartbeat))
		}
	}
	return asks, longest
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
// a still takes every heartbeat b sends in that time (none lost), and asks b's kernel only as
// often as b itself fell silent at a's socket (none when b kept sending on time), because the
// garbage never shares the heartbeats' queue. The delay from each of b's heartbeats to a's
// reading it is logged with and without the flood (medians).
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
	checks, refused, before := a.checks.Load(), a.HeartbeatsRefused(), log.count()
	sent, done := flood(t, a.Port(), stop)
	<-time.After(window) // the flood's length: the stimulus, not a wait for anything
	close(stop)
	<-done
	end := time.Now()
	asked := a.checks.Load() - checks
	during := log.since(before - 1) // from the last heartbeat taken before the flood
	flooded, floodLost := delays(during)
	explained, longest := asksForSilences(during, end, a.heartbeat)
	other := map[string]uint64{} // refused for any reason but their source: b's own heartbeats
	for reason, n := range a.HeartbeatsRefused() {
		if n -= refused[reason]; n > 0 {
			other[reason] = n
		}
	}
	strays := other[refusedSource]
	delete(other, refusedSource)
	t.Logf("without the flood: %d of b's heartbeats, %d lost, delay to a's reading median %v; with %d datagrams of garbage in %v (%d looking like heartbeats, refused at the gossip socket): %d heartbeats, %d lost, delay median %v; a asked b's kernel %d times, b's longest silence at a's socket %v; other heartbeats refused %v",
		len(calm), calmLost, median(calm).Round(time.Millisecond), *sent, window, strays, len(flooded), floodLost, median(flooded).Round(time.Millisecond),
		asked, longest.Round(time.Millisecond), other)
	if floodLost > 0 || len(flooded) < 10 {
		t.Fatalf("a lost %d of b's heartbeats during the flood and took %d", floodLost, len(flooded))
	}
	if asked > int64(explained) {
		t.Fatalf("a found b silent and asked its kernel %d times during the flood, where b's own silences at a's socket (longest %v) allow %d",
			asked, longest.Round(time.Millisecond), explained)
	}
	if strays == 0 {
		t.Fatal("no garbage looking like heartbeats reached a: the test flooded nothing")
	}
}
