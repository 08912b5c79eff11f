package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// BenchmarkDataplane measures failover where a user sees it: the client sends an HTTP GET to
// the EXTERNAL-IP every 10 ms (each on a new connection) through the real kube-proxy while
// the owning node's speaker is stopped, and the longest time without a successful answer is
// the outage. It prints a Markdown report (make bench-dataplane saves it). It ignores b.N.
func BenchmarkDataplane(b *testing.B) {
	runs := envSize(b, "PORTICO_BENCH_DATAPLANE_RUNS", 11, 1) // failovers per blow
	inDataplaneLab(b, func(b *testing.B, e *dpEnv) {
		svc, ip := e.create(lbService{name: "bench", selector: "gitea", port: 80, target: "http"})

		var rep strings.Builder
		fmt.Fprintf(&rep, "Measured %s on %d CPUs; three nodes, each a speaker and a real kube-proxy (nftables) in its network namespace, the pod behind a third node, real kube-apiserver, kube-controller-manager and portico-controller.\n\n",
			time.Now().UTC().Format("2006-01-02"), runtimeCPUs())
		fmt.Fprintf(&rep, "A GET every 10 ms from the client, each on a new connection with a 1 s timeout; the longest time between two successful answers around the blow, %d runs each.\n\n", runs)
		fmt.Fprintf(&rep, "| blow | median | min | max | failed requests (median) |\n|---|---|---|---|---|\n")
		for _, blow := range []string{"none", "SIGTERM", "SIGKILL", "link cut"} {
			var gaps []time.Duration
			var failed []int
			for i := 0; i < runs; i++ {
				// The address stays with the node that took it over in the run before.
				owner, next := e.podBehindThirdNode(svc, ip)
				e.settle(ip, owner)
				g, f := e.httpFailover(ip, owner, next, blow)
				gaps, failed = append(gaps, g), append(failed, f)
			}
			slices.Sort(failed)
			fmt.Fprintf(&rep, "| %s | %s | %s | %s | %d |\n", blow, ms(median(gaps)), ms(slices.Min(gaps)), ms(slices.Max(gaps)), failed[len(failed)/2])
		}
		b.Log("\n" + rep.String())
		if out := os.Getenv("PORTICO_BENCH_DATAPLANE_OUT"); out != "" {
			must(b, os.WriteFile(out, []byte(rep.String()), 0o644))
		}
	})
}

// podBehindThirdNode points svc at the pod of the node that is neither ip's owner (the node
// holding it) nor the next owner, so a cut link never takes the pod with it, and waits until
// only that pod answers.
func (e *dpEnv) podBehindThirdNode(svc *corev1.Service, ip netip.Addr) (owner, next string) {
	owner, next = e.heldBy(ip)
	third := slices.DeleteFunc([]string{"node-a", "node-b", "node-c"}, func(n string) bool { return n == owner || n == next })[0]
	updateService(e.t, e.c, svc, func() { svc.Spec.Selector = map[string]string{"pod": e.podOn(third)} })
	url := fmt.Sprintf("http://%s/", ip)
	waitFor(e.t, "only "+e.podOn(third)+" answers", 30*time.Second, func() bool {
		body, err := e.get(url)
		pod, _ := answer(body)
		return err == nil && pod == e.podOn(third)
	})
	return owner, next
}

// httpFailover probes http://ip/ every 10 ms, deals the blow to owner's speaker once 20 answers
// came, keeps probing until next announces the address and 50 more answers came, heals, and
// returns the longest gap between successful answers and how many requests failed.
func (e *dpEnv) httpFailover(ip netip.Addr, owner, next, blow string) (gap time.Duration, failed int) {
	url := fmt.Sprintf("http://%s/", ip)
	client := e.httpClient(time.Second)
	var mu sync.Mutex
	var ok []time.Time
	var wg sync.WaitGroup
	stop := make(chan struct{})
	go func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := client.Get(url)
				if err == nil {
					resp.Body.Close()
				}
				mu.Lock()
				defer mu.Unlock()
				if err == nil && resp.StatusCode == 200 {
					ok = append(ok, time.Now())
				} else {
					failed++
				}
			}()
		}
	}()
	successes := func() int { mu.Lock(); defer mu.Unlock(); return len(ok) }
	waitFor(e.t, "answers before the blow", 5*time.Second, func() bool { return successes() >= 20 })
	heal := func() {}
	if blow != "none" { // "none" measures the probe's own jitter on this machine
		_, heal = e.hurt(owner, blow)
		waitFor(e.t, next+" announces after "+blow, 20*time.Second, func() bool {
			return slices.Contains(e.announcers(ip), next)
		})
	}
	after := successes()
	waitFor(e.t, "50 answers after the takeover", 20*time.Second, func() bool { return successes() >= after+50 })
	close(stop)
	wg.Wait()
	heal()
	slices.SortFunc(ok, time.Time.Compare)
	for i := 1; i < len(ok); i++ {
		gap = max(gap, ok[i].Sub(ok[i-1]))
	}
	return gap, failed
}
