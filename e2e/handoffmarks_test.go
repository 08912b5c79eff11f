package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/netlab"
)

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
		// The hand-off bit is free beside each; Istio's ambient mode takes the default slot bits,
		// so there the hand-off runs by address only.
		reasons := map[string]string{"calico": v1alpha1.ReasonMarksFree, "cilium": v1alpha1.ReasonMarksFree, "istio": v1alpha1.ReasonSlotMarksInUse}
		for _, cni := range netlab.CNIMarks {
			t.Run(cni.Name, func(t *testing.T) {
				e.t = t
				e.withMarks(cni)
				for _, n := range e.Nodes {
					e.handoffMarks(n.Name, reasons[cni.Name], "")
				}
				svc, ip := e.markedService("marks-" + cni.Name)
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
func (e *dpEnv) withMarks(cni netlab.CNIMark) {
	t := e.t
	for _, n := range e.Nodes {
		if out, err := exec.Command("ip", "netns", "exec", n.NS, "sh", "-ec", cni.Set).CombinedOutput(); err != nil {
			t.Fatalf("%s's marks on %s: %v\n%s", cni.Name, n.Name, err, out)
		}
		t.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "exec", n.NS, "sh", "-c", cni.Unset).CombinedOutput(); err != nil {
				t.Errorf("removing %s's marks on %s: %v\n%s", cni.Name, n.Name, err, out)
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
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "gitea"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")},
				{Name: "echo", Port: echoPort, TargetPort: intstr.FromInt32(echoPort)}}}}
	ip := e.served(svc)
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

// handoffMarks waits until node's Speaker carries the HandoffMarks condition with reason (and
// its message has note).
func (e *l2Env) handoffMarks(node, reason, note string) {
	e.t.Helper()
	waitFor(e.t, node+"'s Speaker says HandoffMarks "+reason, 20*time.Second, func() bool {
		var sp v1alpha1.Speaker
		if e.c.Get(context.Background(), clientKey(node), &sp) != nil {
			return false
		}
		c := meta.FindStatusCondition(sp.Status.Conditions, v1alpha1.ConditionHandoffMarks)
		return c != nil && c.Reason == reason && strings.Contains(c.Message, note) &&
			(c.Status == metav1.ConditionTrue) == (reason == v1alpha1.ReasonMarksFree)
	})
}

// TestHandoffRefusesMarksInUse: a node where another rule sets the hand-off bit runs no
// hand-off: its speaker says why on its Speaker (HandoffMarks False, HandoffMarkInUse, naming
// the rule) and in a Warning event, and makes no table, rule or route; once the rule is gone, a
// restarted speaker runs the hand-off again.
func TestHandoffRefusesMarksInUse(t *testing.T) {
	inHandoffLab(t, func(t *testing.T, e *l2Env, pod labPod) {
		ns := e.node("node-b").NS
		other := `nft add table ip other; nft 'add chain ip other pre { type filter hook prerouting priority mangle; }'; nft add rule ip other pre iifname cni0 meta mark set meta mark or 0x2000`
		run(t, "ip", "netns", "exec", ns, "sh", "-ec", other)
		logged := e.logOffsets()
		e.kill("node-b", syscall.SIGTERM)
		e.startSpeaker("node-b")
		e.waitJoined("node-b", logged)
		e.handoffMarks("node-b", v1alpha1.ReasonHandoffMarkInUse, "table ip other chain pre (0x2000)")
		e.handoffMarks("node-a", v1alpha1.ReasonMarksFree, "")
		waitFor(t, "a Warning event HandoffMarkInUse on node-b's Speaker", 20*time.Second, func() bool {
			var evs eventsv1.EventList
			if err := e.c.List(context.Background(), &evs); err != nil {
				return false
			}
			return slices.ContainsFunc(evs.Items, func(ev eventsv1.Event) bool {
				return ev.Regarding.Kind == "Speaker" && ev.Regarding.Name == "node-b" && ev.Type == corev1.EventTypeWarning &&
					ev.Reason == v1alpha1.ReasonHandoffMarkInUse && strings.Contains(ev.Note, "--l2-handoff-mark")
			})
		})
		if left := netlab.HandoffState(ns, false); left != "" {
			t.Errorf("node-b holds hand-off state though its hand-off is off:\n%s", left)
		}
		run(t, "ip", "netns", "exec", ns, "nft", "delete", "table", "ip", "other")
		logged = e.logOffsets()
		e.kill("node-b", syscall.SIGTERM)
		e.startSpeaker("node-b")
		e.waitJoined("node-b", logged)
		e.handoffMarks("node-b", v1alpha1.ReasonMarksFree, "")
	})
}
