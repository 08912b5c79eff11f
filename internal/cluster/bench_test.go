package cluster_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/portico-lb/portico/internal/netlab"
)

// BenchmarkSpeakerPodDeleted is what a user sees at the client when the speaker pod of the node
// that owns gitea's address (.200) is deleted (`kubectl delete pod`): a GET to the EXTERNAL-IP
// every 10 ms, each on a new connection with a 1 s timeout, from the DaemonSet's new pod until
// it is Ready and 100 more answers came back. It reports the failed requests and the longest
// time between two answers, per run (PORTICO_BENCH_CLUSTER_RUNS, default 3).
func BenchmarkSpeakerPodDeleted(b *testing.B) {
	runs := 3
	if v := os.Getenv("PORTICO_BENCH_CLUSTER_RUNS"); v != "" {
		fmt.Sscan(v, &runs)
	}
	homeLab(b, installWithKubectl, func(e *labEnv) {
		// The probe alone first: its own jitter on this machine.
		p := startProbe(e, "http://10.0.0.200/")
		waitFor(b, "300 answers without a blow", 2*time.Minute, func() (bool, string) {
			n := p.answersSinceMark()
			return n >= 300, fmt.Sprintf("%d", n)
		})
		f, gap := p.stop()
		b.Logf("no blow: %d failed requests, longest gap %s", f, gap)
		b.ReportMetric(float64(gap.Milliseconds()), "no-blow-gap-ms")
		var failed, gaps []float64
		for run := 0; run < runs; run++ {
			f, gap := deleteOwnerSpeaker(e, netip.MustParseAddr("10.0.0.200"))
			b.Logf("run %d: %d failed requests, longest gap %s", run+1, f, gap)
			failed, gaps = append(failed, float64(f)), append(gaps, float64(gap.Milliseconds()))
		}
		b.ReportMetric(median(failed), "failed-requests")
		b.ReportMetric(median(gaps), "gap-ms")
	})
}

// deleteOwnerSpeaker deletes the speaker pod of the node whose MAC the client resolved ip to,
// while probing ip, and returns the failed requests and the longest time between two answers.
func deleteOwnerSpeaker(e *labEnv, ip netip.Addr) (int, time.Duration) {
	ctx := context.Background()
	mac := netlab.Resolve(e.c.Client.NS, ip)
	owner := ""
	for _, n := range e.c.Nodes {
		if strings.EqualFold(mac, n.MAC.String()) {
			owner = n.Name
		}
	}
	if owner == "" {
		e.t.Fatalf("the client resolves %s to %q, no node's MAC", ip, mac)
	}
	var pods corev1.PodList
	if err := e.c.CP.Client.List(ctx, &pods, client.InNamespace("portico-system"),
		client.MatchingFields{"spec.nodeName": owner}); err != nil {
		e.t.Fatal(err)
	}
	victim := ""
	for _, p := range pods.Items {
		if strings.HasPrefix(p.Name, "portico-speaker-") {
			victim = p.Name
		}
	}
	if victim == "" {
		e.t.Fatalf("no speaker pod on %s", owner)
	}
	p := startProbe(e, "http://"+ip.String()+"/")
	e.kubectl("-n", "portico-system", "delete", "pod", victim, "--wait=false")
	e.t.Logf("deleted %s, the speaker on %s, the owner of %s", victim, owner, ip)
	waitFor(e.t, "the speaker DaemonSet Ready again after deleting "+victim, 2*time.Minute, func() (bool, string) {
		var ds appsv1.DaemonSet
		if err := e.c.CP.Client.Get(ctx, client.ObjectKey{Namespace: "portico-system", Name: "portico-speaker"}, &ds); err != nil {
			return false, err.Error()
		}
		var old corev1.Pod
		gone := e.c.CP.Client.Get(ctx, client.ObjectKey{Namespace: "portico-system", Name: victim}, &old) != nil
		return gone && ds.Status.NumberReady == int32(len(e.c.Nodes)), fmt.Sprintf("%s gone: %v, %d ready", victim, gone, ds.Status.NumberReady)
	})
	p.mark()
	waitFor(e.t, "100 answers after the new speaker is Ready", time.Minute, func() (bool, string) {
		n := p.answersSinceMark()
		return n >= 100, fmt.Sprintf("%d", n)
	})
	return p.stop()
}

// probe GETs a URL from the client every 10 ms until stopped.
type probe struct {
	mu        sync.Mutex
	failed    int
	last      time.Time
	gap       time.Duration
	sinceMark int
	done      chan struct{}
	wg        sync.WaitGroup
}

func startProbe(e *labEnv, url string) *probe {
	get := netlab.HTTPClient(e.c.Client.NS, time.Second)
	p := &probe{last: time.Now(), done: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-p.done:
				return
			case <-tick.C:
			}
			body, err := httpGet(get, url)
			now := time.Now()
			p.mu.Lock()
			if err != nil || !strings.HasPrefix(body, "gitea-") {
				p.failed++
			} else {
				p.gap = max(p.gap, now.Sub(p.last))
				p.last = now
				p.sinceMark++
			}
			p.mu.Unlock()
		}
	}()
	return p
}

// mark starts counting answers again from zero.
func (p *probe) mark() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sinceMark = 0
}

// answersSinceMark counts the answers since mark.
func (p *probe) answersSinceMark() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sinceMark
}

func (p *probe) stop() (int, time.Duration) {
	close(p.done)
	p.wg.Wait()
	return p.failed, p.gap
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
