// Package kubeapi is the speaker's Kubernetes client: a REST client per API group it uses and an
// informer per kind it watches, over a scheme of those kinds alone.
//
// controller-runtime's client registers every Kubernetes API group at start-up (client-go's
// full scheme), and a speaker runs on every node: the types, code and tables of some fifty API
// groups it never reads cost an idle speaker about 17 MiB of its 47 (BENCHMARKS.md, "Speaker
// memory"). The controller, one per cluster, keeps controller-runtime.
package kubeapi

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// resources are the kinds the speaker reads or writes: their plural name and whether they live
// in a namespace.
var resources = map[string]struct {
	plural     string
	namespaced bool
}{
	"Service": {"services", true}, "EndpointSlice": {"endpointslices", true}, "Node": {"nodes", false},
	"Secret": {"secrets", true}, "Event": {"events", true}, "Lease": {"leases", true},
	"Speaker": {"speakers", false}, "IPAddressPool": {"ipaddresspools", false}, "L2Advertisement": {"l2advertisements", false},
	"BGPPeer": {"bgppeers", false}, "BGPAdvertisement": {"bgpadvertisements", false}, "BFDProfile": {"bfdprofiles", false},
}

// newScheme knows core/v1, discovery/v1, events/v1, coordination/v1 (the speaker's Lease) and
// Portico's types.
func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(s))
	utilruntime.Must(coordinationv1.AddToScheme(s))
	utilruntime.Must(discoveryv1.AddToScheme(s))
	utilruntime.Must(eventsv1.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}

// Client reads and writes the speaker's kinds straight at the apiserver.
type Client struct {
	scheme *runtime.Scheme
	groups map[schema.GroupVersion]rest.Interface
}

// New returns a Client for cfg; its groups share one HTTP client (one connection).
func New(cfg *rest.Config) (*Client, error) {
	c := &Client{scheme: newScheme(), groups: map[schema.GroupVersion]rest.Interface{}}
	cfg = rest.CopyConfig(cfg)
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	codecs := serializer.NewCodecFactory(c.scheme).WithoutConversion()
	for _, gv := range []schema.GroupVersion{corev1.SchemeGroupVersion, discoveryv1.SchemeGroupVersion, eventsv1.SchemeGroupVersion,
		coordinationv1.SchemeGroupVersion, v1alpha1.GroupVersion, appsV1} {
		gc := rest.CopyConfig(cfg)
		gc.GroupVersion = &gv
		gc.APIPath = "/apis"
		if gv.Group == "" {
			gc.APIPath = "/api"
		}
		gc.NegotiatedSerializer = codecs
		if gv != v1alpha1.GroupVersion && gv != appsV1 && gc.ContentType == "" {
			// Kubernetes' own kinds travel as protobuf (as controller-runtime's client sends
			// them): smaller than JSON and faster to decode, for every Service,
			// EndpointSlice and Node change on every node. Custom resources have only JSON.
			gc.ContentType = runtime.ContentTypeProtobuf
		}
		rc, err := rest.RESTClientForConfigAndClient(gc, httpClient)
		if err != nil {
			return nil, fmt.Errorf("client for %s: %w", gv, err)
		}
		c.groups[gv] = rc
	}
	return c, nil
}

// Scheme is the Client's scheme (for object references in events).
func (c *Client) Scheme() *runtime.Scheme { return c.scheme }

// resource is where one kind lives on the apiserver.
type resource struct {
	gvk        schema.GroupVersionKind // of the object, not of its list
	client     rest.Interface
	plural     string
	namespaced bool
}

// resourceOf finds the resource of obj, an object or a list of them.
func (c *Client) resourceOf(obj runtime.Object) (resource, error) {
	gvks, _, err := c.scheme.ObjectKinds(obj)
	if err != nil {
		return resource{}, err
	}
	gvk := gvks[0]
	gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	r, ok := resources[gvk.Kind]
	if !ok {
		return resource{}, fmt.Errorf("kubeapi: the speaker does not use %s", gvk)
	}
	return resource{gvk: gvk, client: c.groups[gvk.GroupVersion()], plural: r.plural, namespaced: r.namespaced}, nil
}

func (r resource) at(req *rest.Request, namespace string) *rest.Request {
	req = req.Resource(r.plural)
	if r.namespaced {
		req = req.Namespace(namespace)
	}
	return req
}

// Get reads one object from the apiserver into obj.
func (c *Client) Get(ctx context.Context, key types.NamespacedName, obj runtime.Object) error {
	r, err := c.resourceOf(obj)
	if err != nil {
		return err
	}
	return into(r.at(r.client.Get(), key.Namespace).Name(key.Name).Do(ctx), obj)
}

// appsV1 is read for one object alone (DaemonSet): its types stay out of the scheme, and out
// of the binary.
var appsV1 = schema.GroupVersion{Group: "apps", Version: "v1"}

// DaemonSet is what the speaker reads of its DaemonSet.
type DaemonSet struct {
	metav1.ObjectMeta
	Template corev1.PodSpec // the spec of the pods it starts
}

// DaemonSet reads the DaemonSet named by key: the speaker asks for its own at shutdown, to tell
// an uninstall (gone, or being deleted) from a rolling update, and whether the speakers it
// starts next run the L2 hand-off.
func (c *Client) DaemonSet(ctx context.Context, key types.NamespacedName) (DaemonSet, error) {
	var ds struct {
		metav1.ObjectMeta `json:"metadata"`
		Spec              struct {
			Template struct {
				Spec corev1.PodSpec `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	raw, err := c.groups[appsV1].Get().Namespace(key.Namespace).Resource("daemonsets").Name(key.Name).Do(ctx).Raw()
	if err == nil {
		err = json.Unmarshal(raw, &ds)
	}
	return DaemonSet{ObjectMeta: ds.ObjectMeta, Template: ds.Spec.Template.Spec}, err
}

// Create creates obj and reads back what the apiserver stored.
func (c *Client) Create(ctx context.Context, obj runtime.Object) error {
	return c.write(ctx, obj, create)
}

// Update replaces obj (at obj's resourceVersion) and reads back the result.
func (c *Client) Update(ctx context.Context, obj runtime.Object) error {
	return c.write(ctx, obj, update)
}

// UpdateStatus writes obj's status (at obj's resourceVersion) and reads back the result.
func (c *Client) UpdateStatus(ctx context.Context, obj runtime.Object) error {
	return c.write(ctx, obj, updateStatus)
}

// Delete deletes the object of obj's kind named by key.
func (c *Client) Delete(ctx context.Context, key types.NamespacedName, obj runtime.Object) error {
	r, err := c.resourceOf(obj)
	if err != nil {
		return err
	}
	return r.at(r.client.Delete(), key.Namespace).Name(key.Name).Do(ctx).Error()
}

type writeKind int

const (
	create writeKind = iota
	update
	updateStatus
)

// write creates obj, or replaces it or its status, and reads back what the apiserver stored.
func (c *Client) write(ctx context.Context, obj runtime.Object, kind writeKind) error {
	r, err := c.resourceOf(obj)
	if err != nil {
		return err
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return err
	}
	var req *rest.Request
	switch kind {
	case create:
		req = r.at(r.client.Post(), m.GetNamespace())
	case update:
		req = r.at(r.client.Put(), m.GetNamespace()).Name(m.GetName())
	default:
		req = r.at(r.client.Put(), m.GetNamespace()).Name(m.GetName()).SubResource("status")
	}
	return into(req.Body(obj).Do(ctx), obj)
}

// into decodes an answer into obj, zeroed first (as controller-runtime's client does): a decoder
// fills the slices an object already holds in place, so a caller's copy that shares them (the
// status the speaker wrote and compares the next one with) would change under it.
func into(res rest.Result, obj runtime.Object) error {
	if err := res.Error(); err != nil {
		return err
	}
	v := reflect.ValueOf(obj).Elem()
	v.Set(reflect.Zero(v.Type()))
	return res.Into(obj)
}

// CreateEvent sends an event (events.Options.Create).
func (c *Client) CreateEvent(ctx context.Context, ev *eventsv1.Event) error { return c.Create(ctx, ev) }

// list reads every object of r's kind into list, in every namespace.
func (r resource) list(ctx context.Context, list runtime.Object, opts metav1.ListOptions) error {
	return r.at(r.client.Get(), "").VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(list)
}

// watch streams the changes to r's objects, in every namespace.
func (r resource) watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return r.at(r.client.Get(), "").VersionedParams(&opts, metav1.ParameterCodec).Watch(ctx)
}
