package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/portico-lb/portico/internal/netlab"
)

// cniMarks is how a CNI (or a mesh) uses the packet and connection marks on a node, applied as
// it applies them: set runs in every node's namespace before the speakers start, unset after.
type cniMarks struct {
	name       string
	set, unset string // shell
}

// The CNIs' marks. Calico's Felix (iptables dataplane, default mark mask 0xffff0000) marks
// every packet from a workload interface 0x40000 in raw PREROUTING and sets its accept mark
// 0x10000 in its filter chains, an endpoint mark in 0xfff00000 in mangle. Cilium's eBPF
// programs write the whole mark of a pod's packets (its identity in the upper 16 bits, the
// magic 0x0f00 below; an nftables rule stands in for the BPF program here), and its ip rule
// sends the proxy's 0x200/0xf00 to table 2004. Istio's ambient mode marks in 0xfff and keeps the
// mark in the connection's (CONNMARK). kube-proxy's own masquerade mark 0x4000 is the real
// kube-proxy's, in every case.
var cniMarksCases = []cniMarks{
	{name: "calico", set: `
iptables -t raw -N cali-PREROUTING
iptables -t raw -A cali-PREROUTING -j MARK --set-xmark 0x0/0xf0000
iptables -t raw -A cali-PREROUTING -i cni0 -j MARK --set-xmark 0x40000/0x40000
iptables -t raw -I PREROUTING -j cali-PREROUTING
iptables -t mangle -N cali-PREROUTING
iptables -t mangle -A cali-PREROUTING -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
iptables -t mangle -A cali-PREROUTING -i cni0 -j MARK --set-xmark 0x100000/0xfff00000
iptables -t mangle -A cali-PREROUTING -m mark --mark 0x10000/0x10000 -j ACCEPT
iptables -t mangle -I PREROUTING -j cali-PREROUTING
iptables -t filter -N cali-FORWARD
iptables -t filter -A cali-FORWARD -j MARK --set-xmark 0x0/0xe0000
iptables -t filter -A cali-FORWARD -i cni0 -j MARK --set-xmark 0x10000/0x10000
iptables -t filter -A cali-FORWARD -o cni0 -j MARK --set-xmark 0x10000/0x10000
iptables -t filter -A cali-FORWARD -m mark --mark 0x10000/0x10000 -j ACCEPT
iptables -t filter -I FORWARD -j cali-FORWARD`, unset: `
iptables -t raw -D PREROUTING -j cali-PREROUTING; iptables -t raw -F cali-PREROUTING; iptables -t raw -X cali-PREROUTING
iptables -t mangle -D PREROUTING -j cali-PREROUTING; iptables -t mangle -F cali-PREROUTING; iptables -t mangle -X cali-PREROUTING
iptables -t filter -D FORWARD -j cali-FORWARD; iptables -t filter -F cali-FORWARD; iptables -t filter -X cali-FORWARD`},
	{name: "cilium", set: `
nft add table ip cilium-bpf-standin
nft 'add chain ip cilium-bpf-standin from-container { type filter hook prerouting priority raw; }'
nft add rule ip cilium-bpf-standin from-container iifname cni0 meta mark set 0x0a5b0f00
iptables -t mangle -N CILIUM_PRE_mangle
iptables -t mangle -A CILIUM_PRE_mangle -m mark --mark 0xa00/0xe00 -j ACCEPT
iptables -t mangle -I PREROUTING -j CILIUM_PRE_mangle
ip rule add fwmark 0x200/0xf00 lookup 2004 pref 9`, unset: `
nft delete table ip cilium-bpf-standin
iptables -t mangle -D PREROUTING -j CILIUM_PRE_mangle; iptables -t mangle -F CILIUM_PRE_mangle; iptables -t mangle -X CILIUM_PRE_mangle
ip rule del fwmark 0x200/0xf00 lookup 2004 pref 9`},
	{name: "istio", set: `
iptables -t mangle -N ISTIO_PRERT
iptables -t mangle -A ISTIO_PRERT -i cni0 -j MARK --set-xmark 0x539/0xfff
iptables -t mangle -A ISTIO_PRERT -m mark --mark 0x539/0xfff -j CONNMARK --set-xmark 0x111/0xfff
iptables -t mangle -A ISTIO_PRERT -m connmark --mark 0x111/0xfff -j MARK --set-xmark 0x220/0x220
iptables -t mangle -A ISTIO_PRERT -m mark --mark 0x100/0x100 -j ACCEPT
iptables -t mangle -I PREROUTING -j ISTIO_PRERT`, unset: `
iptables -t mangle -D PREROUTING -j ISTIO_PRERT; iptables -t mangle -F ISTIO_PRERT; iptables -t mangle -X ISTIO_PRERT`},
}

// TestHandoffBesideCNIMarksNftables and TestHandoffBesideCNIMarksIptables: the hand-off shares
// the node's marks with the CNI and kube-proxy (nftables or iptables mode) and none of them
// notices it. For each CNI's marks: the speakers started after them, pods reach a Service's
// ClusterIP and its LoadBalancer address and the LAN client its LoadBalancer address, with new
// connections, before, during and after the address moves away from its owner and back, none
// failing; meanwhile the client's long-lived connections survive the moves (0 resets), handed
// off as ever (survivesMoveAndBack).
func TestHandoffBesideCNIMarksNftables(t *testing.T) { handoffBesideCNIMarks(t, "nftables") }

func TestHandoffBesideCNIMarksIptables(t *testing.T) { handoffBesideCNIMarks(t, "iptables") }

func handoffBesideCNIMarks(t *testing.T, proxyMode string) {
	inDataplaneLabOf(t, proxyMode, func(t *testing.T, e *dpEnv) {
		for _, p := range e.lab.Pods {
			stop, err := netlab.ServeEcho(p.NS, echoPort)
			must(t, err)
			t.Cleanup(func() { _ = stop() })
		}
		for _, cni := range cniMarksCases {
			t.Run(cni.name, func(t *testing.T) {
				e.t = t
				e.withMarks(cni)
				svc, ip := e.markedService("marks-" + cni.name)
				owner, next := ownerAndNext(ip)
				e.expectOwner(ip, owner)
				r := e.startRequests(svc, ip)
				r.during(t, "before", 10)
				r.phase("during")
				survivesMoveAndBack(t, e.l2Env, netip.AddrPortFrom(ip, echoPort), owner, next, stopSpeaker, true)
				r.during(t, "after", 10)
				r.stop()
				r.check(t)
			})
		}
	})
}

// withMarks applies cni's marks on every node and restarts the speakers, as they would start on
// a node whose CNI runs already; the marks go when the test ends.
func (e *dpEnv) withMarks(cni cniMarks) {
	t := e.t
	for _, n := range e.Nodes {
		if out, err := exec.Command("ip", "netns", "exec", n.NS, "sh", "-ec", cni.set).CombinedOutput(); err != nil {
			t.Fatalf("%s's marks on %s: %v\n%s", cni.name, n.Name, err, out)
		}
		t.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "exec", n.NS, "sh", "-c", cni.unset).CombinedOutput(); err != nil {
				t.Errorf("removing %s's marks on %s: %v\n%s", cni.name, n.Name, err, out)
			}
		})
	}
	for _, n := range e.Nodes {
		logged := e.logOffsets()
		e.kill(n.Name, syscall.SIGTERM)
		e.startSpeaker(n.Name)
		e.waitJoined(n.Name, logged)
	}
}

// markedService creates a LoadBalancer Service of the three pods with an HTTP port (80) and the
// echo port, and waits for its address and for every node's kube-proxy to serve it.
func (e *dpEnv) markedService(name string) (*corev1.Service, netip.Addr) {
	t, ctx := e.t, context.Background()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "gitea"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")},
				{Name: "echo", Port: echoPort, TargetPort: intstr.FromInt32(echoPort)}}}}
	must(t, e.c.Create(ctx, svc))
	var ip netip.Addr
	waitFor(t, name+" gets an EXTERNAL-IP", 30*time.Second, func() bool {
		if e.c.Get(ctx, client.ObjectKeyFromObject(svc), svc) != nil || len(svc.Status.LoadBalancer.Ingress) == 0 {
			return false
		}
		ip = netip.MustParseAddr(svc.Status.LoadBalancer.Ingress[0].IP)
		return true
	})
	for _, n := range e.Nodes {
		waitFor(t, "kube-proxy on "+n.Name+" serves "+ip.String(), 30*time.Second, func() bool {
			return strings.Contains(nftRuleset(n.NS), ip.String())
		})
	}
	e.reach(fmt.Sprintf("http://%s/", ip), 20*time.Second)
	return svc, ip
}

// requests are new connections made in a loop from each pod to a Service's ClusterIP and
// LoadBalancer address and from the LAN client to its LoadBalancer address, counted by way and
// phase.
type requests struct {
	mu      sync.Mutex
	now     string
	ok, bad map[string]int // by "phase: way"
	errs    map[string]string
	ways    []string
	phases  []string
	done    chan struct{}
	wg      sync.WaitGroup
}

func (e *dpEnv) startRequests(svc *corev1.Service, ip netip.Addr) *requests {
	r := &requests{now: "before", ok: map[string]int{}, bad: map[string]int{}, errs: map[string]string{}, done: make(chan struct{})}
	loop := func(way, ns, url string) {
		r.ways = append(r.ways, way)
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			for {
				select {
				case <-r.done:
					return
				case <-time.After(100 * time.Millisecond):
				}
				r.mu.Lock()
				phase := r.now
				r.mu.Unlock()
				body, err := getFrom(ns, url)
				if pod, _ := answer(body); err == nil && pod == "" {
					err = fmt.Errorf("answer %q", body)
				}
				r.count(phase, way, err)
			}
		}()
	}
	for _, p := range e.lab.Pods {
		loop(p.Name+" -> ClusterIP", p.NS, fmt.Sprintf("http://%s/", svc.Spec.ClusterIP))
		loop(p.Name+" -> LoadBalancer", p.NS, fmt.Sprintf("http://%s/", ip))
	}
	loop("LAN client -> LoadBalancer", e.Client.NS, fmt.Sprintf("http://%s/", ip))
	return r
}

func (r *requests) count(phase, way string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := phase + ": " + way
	if err != nil {
		r.bad[key]++
		if r.errs[key] == "" {
			r.errs[key] = err.Error()
		}
		return
	}
	r.ok[key]++
}

func (r *requests) phase(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.now = name
	r.phases = append(r.phases, name)
}

// during enters phase name and waits until every way has made n requests in it.
func (r *requests) during(t *testing.T, name string, n int) {
	r.phase(name)
	waitFor(t, fmt.Sprintf("%d requests each way %s", n, name), 60*time.Second, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, way := range r.ways {
			if key := name + ": " + way; r.ok[key]+r.bad[key] < n {
				return false
			}
		}
		return true
	})
}

func (r *requests) stop() {
	close(r.done)
	r.wg.Wait()
}

// check fails for every way and phase with a failed request or none at all.
func (r *requests) check(t *testing.T) {
	for _, phase := range r.phases {
		for _, way := range r.ways {
			key := phase + ": " + way
			t.Logf("%s: %d of %d requests failed", key, r.bad[key], r.ok[key]+r.bad[key])
			switch {
			case r.bad[key] > 0:
				t.Errorf("%s: %d of %d requests failed (first: %s)", key, r.bad[key], r.ok[key]+r.bad[key], r.errs[key])
			case r.ok[key] == 0:
				t.Errorf("%s: no request made", key)
			}
		}
	}
}
