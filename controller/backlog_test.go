package controller_test

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller"
	"github.com/portico-lb/portico/controller/decide"
)

// TestBacklogInCreationOrderAtStart: the home-lab pool and its four apps applied at once, as a
// GitOps sync does, before the controller is up. The controller decided its backlog in the
// informers' list order (namespace/name), so argocd got .200 and gitea .201; it must serve it
// in creation order, as kubectl portico plan predicts. Gitea, ArgoCD, Harbor and Grafana are
// created a second apart (creationTimestamp has whole seconds), against their names' order.
func TestBacklogInCreationOrderAtStart(t *testing.T) {
	createPoolsBeforeController(t, map[string]porticov1.IPAddressPoolSpec{"home-lab": addresses("10.0.0.200-10.0.0.215")})
	ns := namespace(t, nil)
	apps := createApart(t, ns, []string{"gitea", "argocd", "harbor", "grafana"})
	want := inCreationOrder(apps, "10.0.0.200")
	plan := planned(t, nil)
	startManager(t)
	agree(t, ns, want, plan)
}

// TestBacklogInCreationOrderWhenThePoolAppears: the controller is up first; the apps wait for
// the pool they name, which comes last. The plan made before the pool is applied and the
// controller agree, and both serve the backlog in creation order.
func TestBacklogInCreationOrderWhenThePoolAppears(t *testing.T) {
	startManager(t)
	ns := namespace(t, nil)
	apps := createApart(t, ns, []string{"grafana", "argocd", "harbor", "gitea"}, withAnnotation(porticov1.AnnotationAddressPool, "backlog-late"))
	want := inCreationOrder(apps, "198.51.100.232")
	for name := range want {
		waitReason(t, ns, name, porticov1.ReasonNoMatchingPool)
	}
	pool := porticov1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "backlog-late"}, Spec: addresses("198.51.100.232/29")}
	plan := planned(t, []porticov1.IPAddressPool{pool})
	createPool(t, pool.Name, pool.Spec)
	agree(t, ns, want, plan)
}

// agree waits for the Services to be given addresses, then compares them with creation order
// (want) and with the plan, by name.
func agree(t *testing.T, ns string, want, plan map[string]string) {
	t.Helper()
	for _, name := range slices.Sorted(maps.Keys(want)) {
		svc := waitService(t, ns, name, "an address", func(s *corev1.Service) bool {
			c := allocated(s)
			return c != nil && c.Status == metav1.ConditionTrue
		})
		if got := ips(svc); got != want[name] || plan[ns+"/"+name] != want[name] {
			t.Errorf("%s (created #%d): the controller gave %s, the plan %s; in creation order it gets %s",
				name, order(want, name), got, plan[ns+"/"+name], want[name])
		}
	}
}

// order is the Service's place in creation order: its address's rank among want's.
func order(want map[string]string, name string) int {
	ips := slices.SortedFunc(maps.Values(want), func(x, y string) int {
		return netip.MustParseAddr(x).Compare(netip.MustParseAddr(y))
	})
	return slices.Index(ips, want[name]) + 1
}

// createApart creates the Services in the order given, each in a later second than the one
// before (creationTimestamp has whole seconds), and returns them as created.
func createApart(t *testing.T, ns string, names []string, opts ...svcOpt) []*corev1.Service {
	t.Helper()
	var created []*corev1.Service
	for i, name := range names {
		if i > 0 {
			waitPastSecond(t, created[i-1].CreationTimestamp.Time)
		}
		created = append(created, createService(t, ns, name, opts...))
	}
	return created
}

// waitPastSecond waits until this machine's clock (the test apiserver's) is in a later second
// than at.
func waitPastSecond(t *testing.T, at time.Time) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return time.Now().Truncate(time.Second).After(at), nil
	})
	if err != nil {
		t.Fatalf("the clock never passed %s", at)
	}
}

// inCreationOrder gives the Services consecutive addresses from first, oldest first
// (decide.OlderFirst), by name.
func inCreationOrder(svcs []*corev1.Service, first string) map[string]string {
	svcs = slices.Clone(svcs)
	slices.SortFunc(svcs, func(x, y *corev1.Service) int {
		return decide.OlderFirst(x.CreationTimestamp.Time, x.Namespace+"/"+x.Name, y.CreationTimestamp.Time, y.Namespace+"/"+y.Name)
	})
	want := map[string]string{}
	ip := netip.MustParseAddr(first)
	for _, svc := range svcs {
		want[svc.Name] = ip.String()
		ip = ip.Next()
	}
	return want
}

// planned is what kubectl portico plan predicts with pools applied: each Service's addresses
// after the change, by namespace/name.
func planned(t *testing.T, pools []porticov1.IPAddressPool) map[string]string {
	t.Helper()
	p, err := controller.PreviewPools(context.Background(), cp.Client, "", pools, false)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, s := range p.Services {
		got[s.Service] = commaIPs(s.After.IPs)
	}
	return got
}

func commaIPs(ips []netip.Addr) string {
	s := ""
	for i, ip := range ips {
		if i > 0 {
			s += ","
		}
		s += ip.String()
	}
	return s
}
