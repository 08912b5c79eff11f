package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/portico-lb/portico/internal/netlab"
)

// partitionHeal cuts the owner off until the next node answers, heals, and returns how long
// after the heal two MACs still answered.
func (e *l2Env) partitionHeal(ip netip.Addr) time.Duration {
	owner, next := e.heldBy(ip)
	e.settle(ip, owner)
	port := e.node(owner).Port
	run(e.t, "ip", "-n", e.Switch, "link", "set", port, "down")
	waitFor(e.t, next+" takes over", 10*time.Second, func() bool { return netlab.Resolve(e.Client.NS, ip) == e.macOf(next) })
	prober := e.arpProber()
	defer prober.close()
	heal := time.Now()
	run(e.t, "ip", "-n", e.Switch, "link", "set", port, "up")
	last := time.Duration(0)
	for time.Since(heal) < 3*time.Second {
		if macs := prober.ask(ip, 20*time.Millisecond); len(macs) > 1 {
			last = time.Since(heal)
		}
	}
	return last
}

// arpProber asks from the client namespace without touching the client's neighbour table.
type arpProber struct{ *netlab.ARPAsker }

func (e *l2Env) arpProber() *arpProber {
	a, err := netlab.NewARPAsker(e.Client)
	must(e.t, err)
	return &arpProber{a}
}

func (p *arpProber) close() { _ = p.Close() }

// ask broadcasts one request for ip and returns the MACs that answer within wait.
func (p *arpProber) ask(ip netip.Addr, wait time.Duration) []string { return p.AskUntil(ip, wait, 0) }

// hogCPU starts four busy loops (twice the two CPUs of these machines), which run until ctx
// ends; the function it returns waits for that.
func (e *l2Env) hogCPU(ctx context.Context) (wait func()) {
	var hogs []*exec.Cmd
	for range 4 {
		c := exec.CommandContext(ctx, "sh", "-c", "while :; do :; done")
		must(e.t, c.Start())
		hogs = append(hogs, c)
	}
	return func() {
		for _, c := range hogs {
			_ = c.Wait() // returns when the context's end has killed it
		}
	}
}

// falseLossesUnderLoad loads the CPUs with busy loops for d while nobody dies, and returns
// how many member losses the speakers counted meanwhile, and which detector declared them (as
// the speakers' logs say).
func (e *l2Env) falseLossesUnderLoad(d time.Duration) (int, string) {
	// Wait until the group is whole again after the restart or the last failover.
	ip := netip.MustParseAddr("198.51.100.220")
	owner, _ := e.heldBy(ip) // whoever holds it since the last failover
	e.settle(ip, owner)
	before := 0.0
	logged := map[string]int{}
	for _, n := range e.Nodes {
		before += e.metric(n.Name, "portico_memberlist_members_lost_total")
		logged[n.Name] = len(e.speakerLog(n.Name))
	}
	// The load runs for d: the busy loops are killed when the context ends.
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	e.hogCPU(ctx)()
	after := 0.0
	by := map[string]int{}
	for _, n := range e.Nodes {
		after += e.metric(n.Name, "portico_memberlist_members_lost_total")
		for _, line := range strings.Split(e.speakerLog(n.Name)[logged[n.Name]:], "\n") {
			if strings.Contains(line, `"membership changed"`) && strings.Contains(line, `"alive":false`) {
				by[detector(line)]++
			}
		}
	}
	var how []string
	for _, k := range slices.Sorted(maps.Keys(by)) {
		how = append(how, fmt.Sprintf("%s %d", k, by[k]))
	}
	if len(how) == 0 {
		return int(after - before), ""
	}
	return int(after - before), "(" + strings.Join(how, ", ") + ")"
}

// detector names what declared a loss in a "membership changed" log line.
func detector(line string) string {
	switch {
	case strings.Contains(line, `"how":"memberlist"`):
		return "memberlist"
	case strings.Contains(line, "refused a connection"), strings.Contains(line, "did not answer"):
		return "fast path"
	}
	return "other"
}
