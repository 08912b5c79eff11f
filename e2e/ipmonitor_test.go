package e2e

import (
	"bufio"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// ipEvent is one line of `ip -ts monitor`: when ip received the kernel's message, and the rest
// of the line.
type ipEvent struct {
	at   time.Time
	line string
}

// ipMonitor follows `ip -ts monitor <object>` (neigh or route) in namespace ns. It returns
// only once the monitor is subscribed, which a marker entry added to ns and seen coming back
// proves: `ip` subscribes some time after it starts, and an event before that is lost for
// good (a failover's single neighbour update was, on a loaded CI machine).
func ipMonitor(t testing.TB, ns, object string) (lines <-chan ipEvent, stop func()) {
	t.Helper()
	const marker = "203.0.113.254" // TEST-NET-3, only ever inside ns
	add, del := []string{"route", "replace", marker + "/32", "dev", "lo"}, []string{"route", "del", marker + "/32", "dev", "lo"}
	if object == "neigh" {
		add = []string{"neigh", "replace", marker, "dev", "eth0", "lladdr", "02:00:5e:00:53:fe", "nud", "permanent"}
		del = []string{"neigh", "del", marker, "dev", "eth0"}
	}
	cmd := exec.Command("ip", "-n", ns, "-ts", "monitor", object)
	out, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	ch := make(chan ipEvent, 1024)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			ev := ipEvent{at: time.Now(), line: sc.Text()}
			if stamp, rest, ok := strings.Cut(ev.line, " "); ok && strings.HasPrefix(stamp, "[") {
				if at, err := time.ParseInLocation("[2006-01-02T15:04:05.000000]", stamp, time.Local); err == nil {
					ev.at, ev.line = at, rest
				}
			}
			ch <- ev
		}
		close(ch)
	}()
	stop = func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	// Add and remove the marker in turn (a repeated identical add may announce nothing) until
	// one of those changes comes back.
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("ip monitor %s in %s never showed its marker", object, ns)
		}
		change := add
		if i%2 == 1 {
			change = del
		}
		run(t, "ip", append([]string{"-n", ns}, change...)...)
		if sawMarker(t, ch, marker, 100*time.Millisecond) {
			if i%2 == 0 {
				run(t, "ip", append([]string{"-n", ns}, del...)...)
			}
			return ch, stop
		}
	}
}

// sawMarker reads events for up to wait and reports whether one mentions marker.
func sawMarker(t testing.TB, ch <-chan ipEvent, marker string, wait time.Duration) bool {
	timeout := time.After(wait)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatal("ip monitor ended")
			}
			if strings.Contains(ev.line, marker) {
				return true
			}
		case <-timeout:
			return false
		}
	}
}
