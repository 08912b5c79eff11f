package e2e

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/controlplane"
	"github.com/portico-lb/portico/rules"
	"github.com/portico-lb/portico/speaker/kubeapi"
)

// ownConnection is cfg with a dialer of its own: client-go shares one transport (one HTTP/2
// connection) between clients of equal configs, and each node of a cluster has its own.
func ownConnection(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	cfg.QPS = -1 // ctrl.GetConfig's setting in the speaker binary
	return cfg
}

// speakerKinds are the kinds a speaker watches (speaker.Start's informers); the benchmark
// checks them against the watches the real speakers of the run hold (hollowMatchesReal).
var speakerKinds = []struct {
	obj      runtime.Object
	resource string
}{{&corev1.Service{}, "services"}, {&discoveryv1.EndpointSlice{}, "endpointslices"}, {&corev1.Node{}, "nodes"},
	{&porticov1.L2Advertisement{}, "l2advertisements"}, {&porticov1.IPAddressPool{}, "ipaddresspools"},
	{&porticov1.BGPPeer{}, "bgppeers"}, {&porticov1.BGPAdvertisement{}, "bgpadvertisements"},
	{&porticov1.BFDProfile{}, "bfdprofiles"}, {&porticov1.Speaker{}, "speakers"}}

// keepName is a hollow node's transform: what it caches of an object is its name alone, so a
// thousand hollow nodes' caches fit where a thousand speakers' would not; the apiserver sends,
// and the node decodes, every object whole.
func keepName(obj any) (any, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return obj, nil
	}
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: m.GetNamespace(), Name: m.GetName()}}, nil
}

// hollowNode is one node's watches, as a speaker or as kube-proxy holds them: its own
// connection, its own informers (the speaker's through the speaker's own client, kubeapi), and
// the writes that node makes while idle.
type hollowNode struct {
	synced func() bool
	stop   context.CancelFunc
}

// startHollowSpeaker watches what a speaker watches, through the speaker's client, as node,
// and renews node's speaker Lease every renew, as a speaker does.
func startHollowSpeaker(b testing.TB, cp *controlplane.ControlPlane, node string, renew time.Duration) *hollowNode {
	ctx, cancel := context.WithCancel(context.Background())
	cl, err := kubeapi.New(ownConnection(cp.Config))
	must(b, err)
	c := kubeapi.NewCache(cl, keepName)
	for _, k := range speakerKinds {
		must(b, c.AddEventHandler(k.obj, toolscache.ResourceEventHandlerFuncs{}))
	}
	c.Start(ctx)
	var once sync.Once
	synced := false
	go renewHollowLease(ctx, cl, node, renew)
	return &hollowNode{stop: cancel, synced: func() bool {
		once.Do(func() { synced = c.WaitForCacheSync(ctx) })
		return synced
	}}
}

// renewHollowLease writes node's speaker Lease every renew, as the
// speaker's renewal does once the Lease exists (an update with a new renew time).
func renewHollowLease(ctx context.Context, cl *kubeapi.Client, node string, renew time.Duration) {
	tick := time.NewTicker(renew)
	defer tick.Stop()
	l := &coordinationv1.Lease{}
	key := leaseKey(node)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if l.Name == "" && cl.Get(ctx, key, l) != nil {
			continue
		}
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
		if err := cl.Update(ctx, l); err != nil {
			l = &coordinationv1.Lease{}
		}
	}
}

// kubeProxySelector is kube-proxy's label selector for the Services and EndpointSlices it
// watches (cmd/kube-proxy: no service-proxy-name, not headless).
func kubeProxySelector() string {
	noProxyName, _ := labels.NewRequirement("service.kubernetes.io/service-proxy-name", selection.DoesNotExist, nil)
	noHeadless, _ := labels.NewRequirement(corev1.IsHeadlessService, selection.DoesNotExist, nil)
	return labels.NewSelector().Add(*noProxyName, *noHeadless).String()
}

// startKubeProxy watches what kube-proxy watches as node: Services and EndpointSlices with its
// selector, and its own Node, in protobuf as kube-proxy asks; it writes nothing.
func startKubeProxy(b testing.TB, cp *controlplane.ControlPlane, node string) *hollowNode {
	ctx, cancel := context.WithCancel(context.Background())
	cfg := ownConnection(cp.Config)
	cfg.ContentType = runtime.ContentTypeProtobuf
	cs, err := kubernetes.NewForConfig(cfg)
	must(b, err)
	selected := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTransform(keepName),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = kubeProxySelector() }))
	own := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTransform(keepName),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", node).String()
		}))
	selected.Core().V1().Services().Informer()
	selected.Discovery().V1().EndpointSlices().Informer()
	own.Core().V1().Nodes().Informer()
	selected.Start(ctx.Done())
	own.Start(ctx.Done())
	var once sync.Once
	synced := false
	return &hollowNode{stop: cancel, synced: func() bool {
		once.Do(func() {
			a, c := selected.WaitForCacheSync(ctx.Done()), own.WaitForCacheSync(ctx.Done())
			synced = allTrue(a) && allTrue(c)
		})
		return synced
	}}
}

func allTrue[K comparable](m map[K]bool) bool {
	for _, v := range m {
		if !v {
			return false
		}
	}
	return true
}

// leaseKey is node's speaker Lease, in the namespace the benchmark's speakers renew theirs.
func leaseKey(node string) types.NamespacedName {
	return types.NamespacedName{Namespace: "default", Name: rules.SpeakerLeaseName(node)}
}
