package e2e

import (
	"context"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules"
)

// invariantCounts is what the invariant checker saw, for reports.
type invariantCounts struct {
	Services  int // LoadBalancer Services of Portico's class
	Allocated int // ... that hold an address
	Waiting   int // ... that hold none and say why
	Shared    int // addresses held by more than one Service
	Orphaned  int // Services holding an address outside every pool
	Pools     int
}

func (c invariantCounts) String() string {
	return fmt.Sprintf("%d Services (%d with addresses, %d waiting with a reason, %d orphaned), %d shared addresses, %d pools",
		c.Services, c.Allocated, c.Waiting, c.Orphaned, c.Shared, c.Pools)
}

// checkInvariants reads every Service and pool and returns what breaks Portico's contracts:
//   - an address held by two Services that may not share it (same sharing key, no port in
//     common, and the same selector under externalTrafficPolicy Local);
//   - a LoadBalancer Service of the class (Terminating ones too) with neither an address nor a False IPAllocated
//     condition with a reason, or whose condition is older than its spec;
//   - a Service Portico does not handle that carries Portico's condition or annotation;
//   - a pool whose status is older than its spec or whose counts differ from a recount.
//
// Right after a change the status may lag: callers poll it (waitInvariants).
func checkInvariants(ctx context.Context, c client.Reader, class string) (invariantCounts, []string, error) {
	var counts invariantCounts
	var bad []string
	var svcs corev1.ServiceList
	if err := c.List(ctx, &svcs); err != nil {
		return counts, nil, err
	}
	holders := map[netip.Addr][]*corev1.Service{}
	for i := range svcs.Items {
		svc := &svcs.Items[i]
		key := svc.Namespace + "/" + svc.Name
		cond := meta.FindStatusCondition(svc.Status.Conditions, porticov1.ConditionIPAllocated)
		if !handled(svc, class) {
			if cond != nil {
				bad = append(bad, fmt.Sprintf("%s is not Portico's but carries %s=%s", key, cond.Type, cond.Status))
			}
			if _, ok := svc.Annotations[porticov1.AnnotationAllocatedFromPool]; ok {
				bad = append(bad, fmt.Sprintf("%s is not Portico's but carries %s", key, porticov1.AnnotationAllocatedFromPool))
			}
			continue
		}
		counts.Services++
		var ips []netip.Addr
		for _, in := range svc.Status.LoadBalancer.Ingress {
			ip, err := netip.ParseAddr(in.IP)
			if err != nil {
				bad = append(bad, fmt.Sprintf("%s: ingress %q is not an address", key, in.IP))
				continue
			}
			ips = append(ips, ip)
			holders[ip] = append(holders[ip], svc)
		}
		switch {
		case cond == nil:
			bad = append(bad, fmt.Sprintf("%s has no %s condition (addresses %v)", key, porticov1.ConditionIPAllocated, ips))
			continue
		case cond.ObservedGeneration != svc.Generation:
			bad = append(bad, fmt.Sprintf("%s: condition observed generation %d, spec is at %d", key, cond.ObservedGeneration, svc.Generation))
		case cond.Reason == "" || cond.Message == "":
			bad = append(bad, fmt.Sprintf("%s: condition %s without a reason or message", key, cond.Status))
		case len(ips) == 0 && cond.Status != "False":
			bad = append(bad, fmt.Sprintf("%s holds no address but its condition is %s/%s", key, cond.Status, cond.Reason))
		}
		if len(ips) == 0 {
			counts.Waiting++
		} else {
			counts.Allocated++
		}
		if cond.Reason == porticov1.ReasonOrphanedIP {
			counts.Orphaned++
		}
	}
	for ip, hs := range holders {
		if len(hs) < 2 {
			continue
		}
		counts.Shared++
		for i := range hs {
			for _, other := range hs[i+1:] {
				if why := cannotShare(hs[i], other); why != "" {
					bad = append(bad, fmt.Sprintf("%s held by %s/%s and %s/%s: %s", ip, hs[i].Namespace, hs[i].Name, other.Namespace, other.Name, why))
				}
			}
		}
	}
	poolBad, pools, err := checkPoolCounts(ctx, c, holders)
	if err != nil {
		return counts, nil, err
	}
	counts.Pools = pools
	slices.Sort(bad)
	return counts, append(bad, poolBad...), nil
}

// handled reports whether Portico handles the Service: a LoadBalancer of its class, including
// a Terminating one (deleted, held by a finalizer), which keeps its address until it is gone.
func handled(svc *corev1.Service, class string) bool {
	return svc.Spec.Type == corev1.ServiceTypeLoadBalancer &&
		(svc.Spec.LoadBalancerClass == nil || *svc.Spec.LoadBalancerClass == class)
}

// cannotShare says why two Services may not hold one address, or "" if they may.
func cannotShare(a, b *corev1.Service) string {
	ka, kb := a.Annotations[porticov1.AnnotationAllowSharedIP], b.Annotations[porticov1.AnnotationAllowSharedIP]
	if ka == "" || ka != kb {
		return fmt.Sprintf("sharing keys %q and %q", ka, kb)
	}
	for _, pa := range a.Spec.Ports {
		for _, pb := range b.Spec.Ports {
			if pa.Port == pb.Port && pa.Protocol == pb.Protocol {
				return fmt.Sprintf("both use %s/%d", pa.Protocol, pa.Port)
			}
		}
	}
	local := corev1.ServiceExternalTrafficPolicyLocal
	if (a.Spec.ExternalTrafficPolicy == local || b.Spec.ExternalTrafficPolicy == local) &&
		labels.SelectorFromSet(a.Spec.Selector).String() != labels.SelectorFromSet(b.Spec.Selector).String() {
		return "externalTrafficPolicy Local with different selectors"
	}
	return ""
}

// checkPoolCounts recounts each pool's assigned and available addresses from the addresses
// Services hold, and compares with the pool's status.
func checkPoolCounts(ctx context.Context, c client.Reader, holders map[netip.Addr][]*corev1.Service) ([]string, int, error) {
	var pools porticov1.IPAddressPoolList
	if err := c.List(ctx, &pools); err != nil {
		return nil, 0, err
	}
	var bad []string
	for _, p := range pools.Items {
		st := p.Status
		if st.ObservedGeneration != p.Generation {
			bad = append(bad, fmt.Sprintf("pool %s: status observed generation %d, spec is at %d", p.Name, st.ObservedGeneration, p.Generation))
			continue
		}
		ranges, _ := rules.PoolRanges(&p)
		var assigned [2]int64
		for ip := range holders {
			for _, r := range ranges {
				if r.Contains(ip) {
					assigned[boolIndex(ip.Is6())]++
					break
				}
			}
		}
		if st.AssignedIPv4 != assigned[0] || st.AssignedIPv6 != assigned[1] {
			bad = append(bad, fmt.Sprintf("pool %s counts %d+%d assigned, recount %d+%d", p.Name, st.AssignedIPv4, st.AssignedIPv6, assigned[0], assigned[1]))
		}
		if p.Spec.AvoidBuggyIPs || len(ranges) == 0 {
			continue
		}
		size := new(big.Int)
		for _, r := range ranges {
			first, last := new(big.Int).SetBytes(r.First.AsSlice()), new(big.Int).SetBytes(r.Last.AsSlice())
			size.Add(size, last.Sub(last, first).Add(last, big.NewInt(1)))
		}
		want := size.Sub(size, big.NewInt(assigned[0]+assigned[1])).String()
		if st.Available != want {
			bad = append(bad, fmt.Sprintf("pool %s counts %s available, recount %s", p.Name, st.Available, want))
		}
	}
	return bad, len(pools.Items), nil
}

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}

// waitInvariants polls the invariants until they hold (the last status writes may lag a
// little behind), and fails the test with what still breaks them after the deadline.
func waitInvariants(t testing.TB, c client.Reader, within time.Duration) invariantCounts {
	t.Helper()
	var counts invariantCounts
	var bad []string
	checked := false
	var readErr error // the last read that failed: the final poll may fail on the deadline itself
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		n, b, err := checkInvariants(ctx, c, porticov1.DefaultLoadBalancerClass)
		if err != nil {
			readErr = err
			return false, nil
		}
		counts, bad, checked = n, b, true
		return len(bad) == 0, nil
	})
	if err != nil {
		if !checked {
			t.Fatalf("invariants never checked within %s: reading the cluster failed: %v", within, readErr)
		}
		shown := bad[:min(len(bad), 20)]
		t.Fatalf("invariants still broken after %s (%d problems; %s; last read error: %v):\n%s", within, len(bad), counts, readErr, strings.Join(shown, "\n"))
	}
	return counts
}
