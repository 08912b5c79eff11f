package kubeapi_test

import (
	"context"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/controlplane"
	"github.com/portico-lb/portico/speaker/kubeapi"
)

func start(t *testing.T) (*controlplane.ControlPlane, *kubeapi.Client) {
	t.Helper()
	cp := controlplane.StartFor(t, controlplane.Options{})
	c, err := kubeapi.New(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	return cp, c
}

// TestClient writes and reads a cluster-scoped kind with its status subresource and a
// namespaced one, against a real apiserver.
func TestClient(t *testing.T) {
	cp, c := start(t)
	ctx := context.Background()

	sp := &v1alpha1.Speaker{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	if err := c.Create(ctx, sp); err != nil {
		t.Fatal(err)
	}
	sp.Status.Interfaces = []v1alpha1.SpeakerInterface{{Name: "eth0", Answers: true}}
	since := metav1.NewTime(time.Date(2026, 12, 1, 10, 0, 0, 123456789, time.UTC))
	sp.Status.Sessions = []v1alpha1.PeerSession{{Peer: "tor", State: "Established", Since: &since}}
	kept := sp.Status // shares its slices with sp, as the speaker's last written report does
	if err := c.UpdateStatus(ctx, sp); err != nil {
		t.Fatal(err)
	}
	// The apiserver keeps whole seconds; reading its answer back must not write them into the
	// caller's copy (the speaker then saw every later report as changed and wrote it again).
	if got := kept.Sessions[0].Since.Nanosecond(); got != 123456789 {
		t.Errorf("the write's answer changed a copy sharing the status' slices: nanoseconds %d, want 123456789", got)
	}
	var got v1alpha1.Speaker
	if err := c.Get(ctx, types.NamespacedName{Name: "node-a"}, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Status.Interfaces) != 1 || got.Status.Interfaces[0].Name != "eth0" || got.ResourceVersion != sp.ResourceVersion {
		t.Errorf("read back %+v at %s, wrote %+v at %s", got.Status, got.ResourceVersion, sp.Status, sp.ResourceVersion)
	}

	ev := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: "svc.1", Namespace: "default"}, EventTime: metav1.NowMicro(),
		ReportingController: "portico-speaker", ReportingInstance: "portico-speaker-node-a", Action: "Announce", Reason: "Announced",
		Regarding: corev1.ObjectReference{Kind: "Service", Namespace: "default", Name: "svc", APIVersion: "v1"}, Type: corev1.EventTypeNormal}
	if err := c.CreateEvent(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if ev.UID == "" {
		t.Error("the created event was not read back")
	}

	var sec corev1.Secret
	if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "missing"}, &sec); !apierrors.IsNotFound(err) {
		t.Errorf("a missing Secret: got %v, want NotFound", err)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "x"}, &corev1.ConfigMap{}); err == nil {
		t.Error("a ConfigMap, which the speaker does not use, was read")
	}

	// The speaker's DaemonSet, whose metadata and pod template it reads at shutdown.
	dsKey := types.NamespacedName{Namespace: "default", Name: "portico-speaker"}
	if _, err := c.DaemonSet(ctx, dsKey); !apierrors.IsNotFound(err) {
		t.Errorf("a missing DaemonSet: got %v, want NotFound", err)
	}
	labels := map[string]string{"app": "speaker"}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: dsKey.Namespace, Name: dsKey.Name}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "speaker", Image: "portico", Args: []string{"--l2-handoff-grace=0s"}}}}}}}
	if err := cp.Client.Create(ctx, ds); err != nil {
		t.Fatal(err)
	}
	read, err := c.DaemonSet(ctx, dsKey)
	if err != nil || read.UID != ds.UID || read.DeletionTimestamp != nil {
		t.Errorf("the DaemonSet's metadata: %+v, %v; want UID %s, not being deleted", read.ObjectMeta, err, ds.UID)
	}
	if cs := read.Template.Containers; len(cs) != 1 || cs[0].Name != "speaker" || !slices.Equal(cs[0].Args, []string{"--l2-handoff-grace=0s"}) {
		t.Errorf("the DaemonSet's pod template: %+v, want the speaker container with its args", read.Template)
	}
}

// TestCache follows a namespaced kind asked for before Start and a cluster-scoped one asked for
// after, trims objects through the transform, and lists and gets from the stores.
func TestCache(t *testing.T) {
	cp, c := start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	trimmed := func(obj any) (any, error) {
		if s, ok := obj.(*corev1.Service); ok {
			s.ManagedFields = nil
		}
		return obj, nil
	}
	cache := kubeapi.NewCache(c, trimmed)
	added := make(chan string, 10)
	if err := cache.AddEventHandler(&corev1.Service{}, toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) { added <- o.(*corev1.Service).Name }}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	if err := cp.Client.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	cache.Start(ctx)
	if !cache.WaitForCacheSync(ctx) {
		t.Fatal("never synced")
	}
	if err := cp.Client.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}); err != nil {
		t.Fatal(err)
	}
	// Asked for after Start: it starts at once.
	if err := cache.AddEventHandler(&corev1.Node{}, toolscache.ResourceEventHandlerFuncs{}); err != nil {
		t.Fatal(err)
	}
	waitCtx, done := context.WithTimeout(ctx, 30*time.Second)
	defer done()
	if !cache.WaitForCacheSync(waitCtx) {
		t.Fatal("the Node informer never synced")
	}
	for name := ""; name != "web"; { // the apiserver's own Service "kubernetes" comes too
		select {
		case name = <-added:
		case <-waitCtx.Done():
			t.Fatal("no add event for the Service")
		}
	}

	var got corev1.Service
	if err := cache.Get(ctx, types.NamespacedName{Namespace: "default", Name: "web"}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Ports[0].Port != 80 || got.ManagedFields != nil {
		t.Errorf("cached Service %+v, managedFields %v: want port 80 and no managedFields", got.Spec, got.ManagedFields)
	}
	var node corev1.Node
	if err := cache.Get(ctx, types.NamespacedName{Name: "node-a"}, &node); err != nil {
		t.Fatal(err)
	}
	var nodes corev1.NodeList
	if err := cache.List(ctx, &nodes); err != nil || len(nodes.Items) != 1 || nodes.Items[0].Name != "node-a" {
		t.Errorf("listed %d Nodes (%v), want node-a", len(nodes.Items), err)
	}
	if err := cache.Get(ctx, types.NamespacedName{Namespace: "default", Name: "gone"}, &got); !apierrors.IsNotFound(err) {
		t.Errorf("a Service the cache lacks: got %v, want NotFound", err)
	}
}
