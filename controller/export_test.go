package controller

import (
	"context"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller/decide"
	"github.com/portico-lb/portico/internal/events"
)

// QueuedWritesMax is how many writes the lanes of a status writer hold together.
const QueuedWritesMax = writeLanes * laneDepth

// ServiceWriteLane and PoolWriteLane are the lanes a Service's and a pool's status writes go
// out in.
func ServiceWriteLane(ns, name string) int { return laneOf(ns + "/" + name) }
func PoolWriteLane(name string) int {
	return laneOf(objectKey(&porticov1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: name}}))
}

// TestWriter is a status writer with its own lanes, for the package's apiserver tests.
type TestWriter struct {
	*statusWriter
	lanes *goLanes
}

// Start runs the writer's lanes until ctx ends.
func (w TestWriter) Start(ctx context.Context) error { return w.lanes.Start(ctx) }

// NewStatusWriter gives the package's apiserver tests a status writer of their own.
func NewStatusWriter(c client.Client) TestWriter {
	lanes := newGoLanes()
	w := newStatusWriter(Ports{Status: c.Status(), Live: c, Lanes: lanes})
	w.lull = events.NewLull(eventLull)
	return TestWriter{w, lanes}
}

// SetCondition hands the writer a write that sets cond on svc; a failed write is retried
// through queue, as a reconciler's.
func (w *statusWriter) SetCondition(svc *corev1.Service, cond metav1.Condition, queue chan<- event.GenericEvent) {
	w.submit(svc.Namespace+"/"+svc.Name, svc, writePart{retry: testQueue(queue), apply: func(want *corev1.Service) {
		meta.SetStatusCondition(&want.Status.Conditions, cond)
	}})
}

// SetAddresses hands the writer an allocation's write: svc's ingress becomes ips.
func (w *statusWriter) SetAddresses(svc *corev1.Service, ips []netip.Addr, queue chan<- event.GenericEvent) {
	w.submit(svc.Namespace+"/"+svc.Name, svc, writePart{retry: testQueue(queue), apply: func(want *corev1.Service) {
		want.Status.LoadBalancer.Ingress = nil
		for _, ip := range ips {
			want.Status.LoadBalancer.Ingress = append(want.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip.String()})
		}
	}})
}

// SetHealthCondition hands the writer the health reconciler's write of cond to svc, a Service
// ours says is the controller's.
func (w *statusWriter) SetHealthCondition(svc *corev1.Service, cond metav1.Condition, ours func(*corev1.Service) bool, queue chan<- event.GenericEvent) {
	w.submit(svc.Namespace+"/"+svc.Name, svc, healthPart(decide.Ready{Conditions: []metav1.Condition{cond}}, ours, testQueue(queue)))
}

// SpeakerChange is speakerChange, for the package's tests.
var SpeakerChange = speakerChange

// FindingTTL is how long a speaker's probe round holds addresses back without another.
const FindingTTL = decide.FindingTTL

// Fenced is fenced, for the package's tests.
var Fenced = fenced

// PoolReadyCondition judges a pool's spec, for specs the apiserver's CEL rules refuse.
var PoolReadyCondition = decide.PoolReadyCondition

// testQueue is a test's channel as a reconciler's queue.
func testQueue(q chan<- event.GenericEvent) Queue { return chanQueue{send: q} }

// Refused and Transitions read what the lease series export (portico_lease_writes_refused_total,
// portico_leader_transitions).
func (f *LeaseFence) Refused() uint64    { return f.refused.Load() }
func (f *LeaseFence) Transitions() int64 { return f.transitions.Load() }

// RegisterLeaseMetrics is registerLeaseMetrics, for the package's tests.
var RegisterLeaseMetrics = registerLeaseMetrics
