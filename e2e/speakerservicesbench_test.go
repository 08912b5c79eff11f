package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// BenchmarkSpeakerServices measures one real speaker's memory against the number of Services
// (issue 47's goal: at most 60 MiB at 10 000). One node's speaker runs in a network namespace
// against a real kube-apiserver, beside a few Nodes that run none; LoadBalancer Services, each
// with its EndpointSlice, are added up to each count of PORTICO_BENCH_SPEAKER_SERVICES (default
// "0,1000,10000"), all in one pool that one L2Advertisement gives to that node. At each count,
// once its Speaker status says it answers for every address, its memory is sampled; then it is
// restarted (its Speaker object deleted, so the new one's count is its own) and sampled again
// once it answers for all of them: a speaker starting in a cluster of that size. Each row also
// gives the size of its Speaker object against etcd's request limit. It prints a Markdown
// table, saved to PORTICO_BENCH_SPEAKER_SERVICES_OUT (row by row) when set; with
// PORTICO_BENCH_SPEAKER_SERVICES_PROFILES set to a directory, each sample's heap profile goes
// there. It ignores b.N.
func BenchmarkSpeakerServices(b *testing.B) {
	counts := envCounts(b, "PORTICO_BENCH_SPEAKER_SERVICES", []int{0, 1000, 10000}, 0, math.MaxInt32, true)
	inLabOf(b, 1, func(b *testing.B, e *l2Env) {
		profiles := os.Getenv("PORTICO_BENCH_SPEAKER_SERVICES_PROFILES")
		if profiles != "" {
			e.restartSpeakers([]string{"--pprof-bind-address", ":6060"})
		}
		node := e.Nodes[0].Name
		e.addBystanderNodes(4)
		e.onePoolFor(node, "2001:db8:1::1:0/112")
		var rep strings.Builder
		fmt.Fprintf(&rep, "Measured %s on %d CPUs (load average %s); one speaker (the real binary, no race detector) in a network namespace, real kube-apiserver and etcd, 5 Nodes; every Service has one EndpointSlice and an address of one pool that one L2Advertisement gives to the speaker's node. Each figure is the sample of highest VmRSS of ten a second apart, once the Speaker status counts every address; VmRSS is what its `process_resident_memory_bytes` reports, the heap its `go_memstats_heap_inuse_bytes`. The speaker runs with the DaemonSet's Go settings: %s.\n\n",
			time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtimeCPUs(), loadAverage(b), goSettings(e.Security.GoEnv))
		rep.WriteString("| Services | speaker | VmRSS | Go heap in use | Go stacks | Go runtime total (sys) | goroutines | to plan them all | its Speaker object (JSON) |\n|---|---|---|---|---|---|---|---|---|\n")
		out := os.Getenv("PORTICO_BENCH_SPEAKER_SERVICES_OUT")
		row := func(n int, state string, took time.Duration) {
			s := e.memoryOf(node)
			fmt.Fprintf(&rep, "| %d | %s | %s | %s | %s | %s | %d | %s | %s |\n", n, state, mib(s.rss), mibBytes(s.heap),
				mibBytes(s.stacks), mibBytes(s.goSys), s.goroutines, took.Round(100*time.Millisecond), e.speakerObjectSize(node))
			if profiles != "" {
				e.saveHeapProfile(node, filepath.Join(profiles, fmt.Sprintf("services-%d-%s.pb.gz", n, strings.Fields(state)[0])))
			}
			if out != "" { // each row as it comes: a run stopped half-way keeps its figures
				must(b, os.WriteFile(out, []byte(rep.String()), 0o644))
			}
		}
		have := 0
		first := netip.MustParseAddr("2001:db8:1::1:1")
		for _, n := range counts {
			start := time.Now()
			e.createLBServicesBy(16, "m", addrPlus(first, have), n-have, true)
			have = n
			row(n, "grown to it", e.waitPlanned(node, n, start))
			e.kill(node, syscall.SIGTERM)
			must(b, e.c.Delete(context.Background(), &v1alpha1.Speaker{ObjectMeta: metav1.ObjectMeta{Name: node}}))
			start = time.Now()
			e.startSpeaker(node)
			row(n, "restarted", e.waitPlanned(node, n, start))
		}
		b.Log("\n" + rep.String())
	})
}

// addBystanderNodes creates n Nodes that run no speaker (bystander-1, ...), so the speaker
// watches a few Nodes as it would in a small cluster.
func (e *l2Env) addBystanderNodes(n int) {
	for i := range n {
		name := fmt.Sprintf("bystander-%d", i+1)
		must(e.t, e.c.Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{"kubernetes.io/hostname": name}}}))
	}
}

// onePoolFor creates the pool "mem" of addresses and an L2Advertisement that gives it to node
// alone, so node answers for every address whichever nodes run a speaker.
func (e *l2Env) onePoolFor(node string, addresses v1alpha1.AddressRange) {
	ctx := context.Background()
	must(e.t, e.c.Create(ctx, &v1alpha1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "mem"},
		Spec: v1alpha1.IPAddressPoolSpec{Addresses: []v1alpha1.AddressRange{addresses}}}))
	must(e.t, e.c.Create(ctx, &v1alpha1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "mem"}, Spec: v1alpha1.L2AdvertisementSpec{
		IPAddressPools: []v1alpha1.Name{"mem"},
		NodeSelectors:  []metav1.LabelSelector{{MatchLabels: map[string]string{"kubernetes.io/hostname": node}}}}}))
}

// waitPlanned waits until node's Speaker status is Ready and counts n L2 addresses, and says how
// long that took from start.
func (e *l2Env) waitPlanned(node string, n int, start time.Time) time.Duration {
	waitFor(e.t, fmt.Sprintf("%s Ready, answering for %d addresses", node, n), 5*time.Minute, func() bool {
		var sp v1alpha1.Speaker
		return e.c.Get(context.Background(), clientKey(node), &sp) == nil && int(sp.Status.L2Announcements) == n &&
			meta.IsStatusConditionTrue(sp.Status.Conditions, "Ready")
	})
	return time.Since(start)
}

// etcdRequestLimit is etcd's default --max-request-bytes: the apiserver cannot store an object
// whose write is larger.
const etcdRequestLimit = 1572864

// speakerObjectSize is the size of node's Speaker object as the apiserver serves it in JSON
// (managed fields included: what a write carries to etcd), against etcd's request limit.
func (e *l2Env) speakerObjectSize(node string) string {
	var sp v1alpha1.Speaker
	must(e.t, e.c.Get(context.Background(), clientKey(node), &sp))
	b, err := json.Marshal(&sp)
	must(e.t, err)
	return fmt.Sprintf("%d bytes (%.0f %% of etcd's 1.5 MiB)", len(b), 100*float64(len(b))/etcdRequestLimit)
}

// addrPlus is the address n after a.
func addrPlus(a netip.Addr, n int) netip.Addr {
	for range n {
		a = a.Next()
	}
	return a
}

// loadAverage is the machine's one-minute load average, to say how loaded a run was.
func loadAverage(t testing.TB) string {
	b, err := os.ReadFile("/proc/loadavg")
	must(t, err)
	return strings.Fields(string(b))[0]
}
