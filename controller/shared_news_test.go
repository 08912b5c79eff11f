package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller"
)

// TestSharedProblemIsThePoolsNews: 50 Services of one pool exist before the controller starts,
// with no pods and no speaker (a cluster being restored). Each Service's conditions say
// NoEndpoints and NoSpeakers, but the news is the pool's: one Warning event on the pool for
// each, with the count, and the pool's SharedProblem condition, not 100 events on the Services;
// and their 50 allocations are one IPAllocated event on the pool, not 50.
func TestSharedProblemIsThePoolsNews(t *testing.T) {
	createPoolsBeforeController(t, map[string]porticov1.IPAddressPoolSpec{"shared": addresses("198.51.100.64/26")})
	ns := namespace(t, nil)
	const n = 50
	name := func(i int) string { return fmt.Sprintf("web-%02d", i) }
	for i := range n {
		createService(t, ns, name(i), withAnnotation(porticov1.AnnotationAddressPool, "shared"))
	}
	reg := prometheus.NewRegistry()
	// The 50 Services' problems begin within a second or two of the start; they are news
	// once the first has lasted 5 s.
	cp.RunManager(t, func(mgr ctrl.Manager) error {
		return controller.Setup(mgr, controller.Options{Metrics: controller.NewMetrics(reg), NewsAfter: 5 * time.Second})
	})
	var latest time.Time
	for i := range n {
		svc := waitService(t, ns, name(i), "Announced NoSpeakers", func(s *corev1.Service) bool {
			c := meta.FindStatusCondition(s.Status.Conditions, porticov1.ConditionAnnounced)
			return c != nil && c.Reason == porticov1.ReasonNoSpeakers
		})
		if at := meta.FindStatusCondition(svc.Status.Conditions, porticov1.ConditionAnnounced).LastTransitionTime.Time; at.After(latest) {
			latest = at
		}
	}
	// Every problem is due (5 s after its second-precision lastTransitionTime) ...
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return time.Now().After(latest.Add(7 * time.Second)), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// ... and was reviewed once more before a Service created now gets its conditions (one
	// health worker, in queue order); what was told then is sent once no event waits.
	createService(t, ns, "last", withAnnotation(porticov1.AnnotationAddressPool, "shared"))
	waitAnnounced(t, ns, "last", metav1.ConditionFalse, porticov1.ReasonNoSpeakers,
		"no speaker has reported (no Speaker objects): is the portico-speaker DaemonSet running?")
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		pending, _ := sample(t, reg, "portico_events_pending", nil)
		return pending == 0, nil
	})
	if err != nil {
		t.Fatal("events still waiting")
	}

	perService := map[string]int{}
	for _, e := range porticoEvents(t, ns) {
		if e.Type == "Warning" {
			perService[e.Reason]++
		}
	}
	for _, reason := range []string{porticov1.ReasonNoSpeakers, porticov1.ReasonNoEndpoints} {
		if perService[reason] > 0 {
			t.Errorf("%d %s events on the Services (the pool tells it)", perService[reason], reason)
		}
		told := poolEvents(t, "shared", reason)
		if len(told) != 1 || told[0].Type != "Warning" || !strings.HasPrefix(told[0].Note, "50 Services ("+ns+"/web-00, "+ns+"/web-01, "+ns+"/web-02 and 47 more): ") {
			t.Errorf("want one Warning %s event on the pool counting 50 Services, got %d: %+v", reason, len(told), told)
		}
	}
	// The 50 allocations waited together behind the status writes: one event on the pool
	// (internal/events folds them), at most 10 on Services before.
	allocations := len(poolEvents(t, "shared", "IPAllocated"))
	for _, e := range porticoEvents(t, ns) {
		if e.Reason == "IPAllocated" && e.Regarding.Name != "last" {
			allocations++
		}
	}
	if allocations > 11 {
		t.Errorf("%d IPAllocated events for 50 Services allocated together; want them folded into one on the pool", allocations)
	}
	waitPool(t, "shared", "SharedProblem counting 51 Services", func(p *porticov1.IPAddressPool) bool {
		c := meta.FindStatusCondition(p.Status.Conditions, porticov1.ConditionSharedProblem)
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, "51 Services ("+ns+"/last, "+ns+"/web-00, "+ns+"/web-01 and 48 more): Announced NoSpeakers")
	})
	// Each Service still says it in its own conditions.
	for i := range n {
		waitEndpoints(t, ns, name(i), metav1.ConditionFalse, porticov1.ReasonNoEndpoints,
			"selector app="+name(i)+" matches no pods; namespace "+ns+" has no pods")
	}
}

// poolEvents are the controller's events on the pool with the reason.
func poolEvents(t *testing.T, pool, reason string) []eventsv1.Event {
	t.Helper()
	var evs eventsv1.EventList
	if err := cp.Client.List(context.Background(), &evs, client.InNamespace(metav1.NamespaceDefault)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range evs.Items {
		if e.Regarding.Kind == "IPAddressPool" && e.Regarding.Name == pool && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}
