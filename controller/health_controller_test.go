package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller"
	"github.com/portico-lb/portico/internal/workload"
)

func runPods(t *testing.T, ns string, labels map[string]string, n int, ready bool) []*corev1.Pod {
	t.Helper()
	var pods []*corev1.Pod
	for i := range n {
		p, err := workload.Run(context.Background(), cp.Client, ns, workload.Pod{
			Name: fmt.Sprintf("%s-%d", labels["app"], i), Labels: labels, Node: fmt.Sprintf("worker-%d", i),
			IP: fmt.Sprintf("10.244.%d.%d", i, 10+i), Ready: ready,
		})
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, p)
	}
	return pods
}

func syncSlice(t *testing.T, svc *corev1.Service) {
	t.Helper()
	var cur corev1.Service
	if err := cp.Client.Get(context.Background(), client.ObjectKeyFromObject(svc), &cur); err != nil {
		t.Fatal(err)
	}
	if err := workload.SyncSlice(context.Background(), cp.Client, &cur); err != nil {
		t.Fatal(err)
	}
}

// waitCondition waits for the Service's condition of type typ to read status/reason/message.
func waitCondition(t *testing.T, ns, name, typ string, status metav1.ConditionStatus, reason, message string) {
	t.Helper()
	waitService(t, ns, name, fmt.Sprintf("%s %s/%s %q", typ, status, reason, message), func(s *corev1.Service) bool {
		c := meta.FindStatusCondition(s.Status.Conditions, typ)
		return c != nil && c.Status == status && c.Reason == reason && c.Message == message
	})
}

func waitEndpoints(t *testing.T, ns, name string, status metav1.ConditionStatus, reason, message string) {
	t.Helper()
	waitCondition(t, ns, name, porticov1.ConditionEndpointsReady, status, reason, message)
}

// TestEndpointsReady walks one Service through every reason of EndpointsReady, with its
// address allocated alongside: the two reconcilers' writes to the Service never undo each
// other.
func TestEndpointsReady(t *testing.T) {
	startManager(t)
	createPool(t, "endpoints", addresses("198.51.100.0/28"))
	ns := namespace(t, nil)

	// A selector's typo: the slice exists and is empty, and nothing else says so.
	empty := createService(t, ns, "lonely")
	syncSlice(t, empty)
	waitEndpoints(t, ns, "lonely", metav1.ConditionFalse, porticov1.ReasonNoEndpoints,
		"selector app=lonely matches no pods; namespace "+ns+" has no pods")

	pods := runPods(t, ns, map[string]string{"app": "gitea", "tier": "web"}, 3, false)
	runPods(t, ns, map[string]string{"app": "postgres"}, 1, true)
	gitea := createService(t, ns, "gitea", func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": "gittea"} })
	syncSlice(t, gitea)
	waitEndpoints(t, ns, "gitea", metav1.ConditionFalse, porticov1.ReasonNoEndpoints,
		"selector app=gittea matches no pods; 3 pods have app=gitea")
	waitEvent(t, ns, "gitea", porticov1.ReasonNoEndpoints, "3 pods have app=gitea")
	svc := waitIPs(t, ns, "gitea", "198.51.100.1")
	if c := meta.FindStatusCondition(svc.Status.Conditions, porticov1.ConditionEndpointsReady); c == nil {
		t.Fatalf("the address write dropped EndpointsReady: %+v", svc.Status.Conditions)
	}

	// Fix the selector: the pods match, none is Ready yet.
	update(t, gitea, func() { gitea.Spec.Selector = map[string]string{"app": "gitea"} })
	syncSlice(t, gitea)
	waitEndpoints(t, ns, "gitea", metav1.ConditionFalse, porticov1.ReasonNoReadyEndpoints, "3 pods match selector app=gitea, none is Ready")

	// Two become Ready, then all three.
	for i, p := range pods {
		if i == 2 {
			syncSlice(t, gitea)
			waitEndpoints(t, ns, "gitea", metav1.ConditionTrue, porticov1.ReasonEndpointsReady, "2 of 3 endpoints ready")
		}
		if err := workload.SetReady(context.Background(), cp.Client, p, p.Status.PodIP, true); err != nil {
			t.Fatal(err)
		}
	}
	syncSlice(t, gitea)
	waitEndpoints(t, ns, "gitea", metav1.ConditionTrue, porticov1.ReasonEndpointsReady, "3 ready endpoints")
	// The end of the told problem is told, as "2 of 3" or "3" ready, whichever the health
	// reconciler saw stored first.
	waitEvent(t, ns, "gitea", porticov1.ReasonEndpointsReady, "ready")
	waitIPs(t, ns, "gitea", "198.51.100.1")

	// Pods that match but are in no slice yet (the endpointslice controller has not caught up,
	// or they have no IP).
	runPods(t, ns, map[string]string{"app": "harbor"}, 2, false)
	createService(t, ns, "harbor")
	waitEndpoints(t, ns, "harbor", metav1.ConditionFalse, porticov1.ReasonNoReadyEndpoints,
		"2 pods match selector app=harbor, none is in an EndpointSlice yet (not Ready, or no pod IP)")

	// No selector: reported as such, not as broken.
	createService(t, ns, "external", func(s *corev1.Service) { s.Spec.Selector = nil })
	waitEndpoints(t, ns, "external", metav1.ConditionUnknown, porticov1.ReasonNoSelector,
		"the Service has no selector, so Kubernetes does not manage its endpoints; no EndpointSlice labelled kubernetes.io/service-name=external lists a ready endpoint")

	// A label nowhere near: no hint that would mislead.
	createService(t, ns, "grafana", func(s *corev1.Service) {
		s.Spec.Selector = map[string]string{"app.kubernetes.io/name": "grafana-dashboards"}
	})
	waitEndpoints(t, ns, "grafana", metav1.ConditionFalse, porticov1.ReasonNoEndpoints,
		"selector app.kubernetes.io/name=grafana-dashboards matches no pods; no pod in namespace "+ns+" has labels near it")

	// A Service Portico stops handling loses the conditions.
	update(t, gitea, func() { gitea.Spec.Type = corev1.ServiceTypeClusterIP })
	waitService(t, ns, "gitea", "no Portico conditions", func(s *corev1.Service) bool { return len(s.Status.Conditions) == 0 })
}

// TestBriefProblemsAreNotNews: a Service is usually created a moment before its pods. Its
// EndpointsReady condition says NoEndpoints at once, but a problem that ends before it has
// lasted NewsAfter is no event (it once was a warning for every new Service), and neither is
// its end.
func TestBriefProblemsAreNotNews(t *testing.T) {
	cp.RunManager(t, func(mgr ctrl.Manager) error {
		return controller.Setup(mgr, controller.Options{NewsAfter: time.Hour})
	})
	createPool(t, "brief", addresses("198.51.100.184/30"))
	ns := namespace(t, nil)
	svc := createService(t, ns, "web")
	syncSlice(t, svc)
	waitEndpoints(t, ns, "web", metav1.ConditionFalse, porticov1.ReasonNoEndpoints,
		"selector app=web matches no pods; namespace "+ns+" has no pods")
	runPods(t, ns, map[string]string{"app": "web"}, 2, true)
	syncSlice(t, svc)
	waitEndpoints(t, ns, "web", metav1.ConditionTrue, porticov1.ReasonEndpointsReady, "2 ready endpoints")
	// The allocation's event is written with the address, before any health condition: once
	// it is there, any event told on the first write would be too.
	waitEvent(t, ns, "web", "IPAllocated", "198.51.100.18")
	for _, e := range porticoEvents(t, ns) {
		if e.Reason != "IPAllocated" {
			t.Errorf("event %s %s: %s (a brief state is not news)", e.Type, e.Reason, e.Note)
		}
	}
}
