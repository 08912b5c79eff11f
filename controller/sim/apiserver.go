package sim

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

// apiserver is the simulated kube-apiserver: Services and pools with resourceVersions, 409 on
// a stale update, the Lease, and a watch to every replica.
type apiserver struct {
	w        *world
	rv       int64
	uids     int
	services map[string]*corev1.Service
	pools    map[string]*porticov1.IPAddressPool
	// namespaces' labels: a pool's namespaceSelectors read them
	namespaces map[string]map[string]string
	lease      lease
	watchers   []*replica
	// What the invariants need: the edit each Service's addresses met (an address changes only
	// by a decision from a later one), and the sharing key they were allocated for.
	metAt    map[string]int
	sharedAs map[string][]string
	writer   map[string]string // who wrote each Service last: a replica, or "user"
}

// lease is the leader election's Lease.
type lease struct {
	holder string
	renew  time.Duration
}

func newAPIServer(w *world) *apiserver {
	return &apiserver{w: w, services: map[string]*corev1.Service{}, pools: map[string]*porticov1.IPAddressPool{}, namespaces: map[string]map[string]string{},
		metAt: map[string]int{}, sharedAs: map[string][]string{}, writer: map[string]string{}}
}

var (
	serviceResource = schema.GroupResource{Resource: "services"}
	poolResource    = schema.GroupResource{Group: "portico.dev", Resource: "ipaddresspools"}
)

// editAnnotation counts a Service's edits by users (the sim's own): a write's decision is for
// the count of the copy it was decided from. metadata.generation does not count annotations.
const editAnnotation = "sim.portico.dev/edits"

func edits(svc *corev1.Service) int {
	n, _ := strconv.Atoi(svc.Annotations[editAnnotation])
	return n
}

func (a *apiserver) nextRV() string {
	a.rv++
	return strconv.FormatInt(a.rv, 10)
}

// createService stores a new Service.
func (a *apiserver) createService(svc *corev1.Service) {
	key := svc.Namespace + "/" + svc.Name
	if _, ok := a.services[key]; ok {
		return
	}
	a.uids++
	svc.UID = types.UID(fmt.Sprintf("uid-%d", a.uids))
	svc.ResourceVersion = a.nextRV()
	svc.Generation = 1
	svc.CreationTimestamp = metav1.NewTime(epoch.Add(a.w.now))
	metav1.SetMetaDataAnnotation(&svc.ObjectMeta, editAnnotation, "1")
	a.services[key] = svc
	a.w.logf("user creates %s: %s", key, describe(svc))
	a.notify(key, svc)
}

// editService changes a Service's spec or metadata, as a user does.
func (a *apiserver) editService(key, what string, edit func(*corev1.Service)) {
	svc, ok := a.services[key]
	if !ok {
		return
	}
	old := svc
	svc = svc.DeepCopy()
	edit(svc)
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer { // the apiserver clears it
		svc.Status.LoadBalancer = corev1.LoadBalancerStatus{}
	}
	svc.ResourceVersion = a.nextRV()
	if !equality.Semantic.DeepEqual(old.Spec, svc.Spec) {
		svc.Generation++ // as for every kind: a spec change, not metadata
	}
	metav1.SetMetaDataAnnotation(&svc.ObjectMeta, editAnnotation, strconv.Itoa(edits(old)+1))
	a.w.logf("user edits %s (%s): %s", key, what, describe(svc))
	a.store(key, svc, nil, "the user's edit")
}

// deleteService deletes a Service: it becomes Terminating while it has finalizers.
func (a *apiserver) deleteService(key string) {
	svc, ok := a.services[key]
	if !ok {
		return
	}
	if len(svc.Finalizers) > 0 {
		if svc.DeletionTimestamp != nil {
			return
		}
		svc = svc.DeepCopy()
		svc.DeletionTimestamp = &metav1.Time{Time: epoch.Add(a.w.now)}
		svc.ResourceVersion = a.nextRV()
		a.w.logf("user deletes %s: Terminating (finalizer)", key)
		a.store(key, svc, nil, "the deletion")
		return
	}
	a.w.logf("user deletes %s: gone", key)
	a.remove(key)
}

// dropFinalizers takes the finalizers off a Service; a Terminating one is then gone.
func (a *apiserver) dropFinalizers(key string) {
	svc, ok := a.services[key]
	if !ok || len(svc.Finalizers) == 0 {
		return
	}
	if svc.DeletionTimestamp != nil {
		a.w.logf("user removes the finalizer of Terminating %s: gone", key)
		a.remove(key)
		return
	}
	svc = svc.DeepCopy()
	svc.Finalizers = nil
	svc.ResourceVersion = a.nextRV()
	a.w.logf("user removes the finalizer of %s", key)
	a.store(key, svc, nil, "the finalizer's removal")
}

func (a *apiserver) remove(key string) {
	delete(a.services, key)
	delete(a.metAt, key)
	delete(a.writer, key)
	delete(a.sharedAs, key)
	a.notify(key, nil)
}

// updateStatus is a status update of a Service or a pool: it stores a Service's status and
// annotations (kube-apiserver 1.37), a pool's status, or fails with 409 when obj is not the
// stored version. by names the write for the transcript; d is the decision it carries. obj
// gets the new resourceVersion, as the client decodes the answer into it.
func (a *apiserver) updateStatus(obj client.Object, by string, d *decision) error {
	if pool, ok := obj.(*porticov1.IPAddressPool); ok {
		return a.updatePoolStatus(pool, by)
	}
	svc := obj.(*corev1.Service)
	key := svc.Namespace + "/" + svc.Name
	cur, ok := a.services[key]
	if !ok {
		return apierrors.NewNotFound(serviceResource, svc.Name)
	}
	if cur.UID != svc.UID || cur.ResourceVersion != svc.ResourceVersion {
		a.w.logf("apiserver: 409 for %s (%s at %s, stored %s)", by, key, svc.ResourceVersion, cur.ResourceVersion)
		return apierrors.NewConflict(serviceResource, svc.Name, fmt.Errorf("the object has been modified"))
	}
	if cur.Spec.Type != corev1.ServiceTypeLoadBalancer && len(svc.Status.LoadBalancer.Ingress) > 0 {
		return apierrors.NewInvalid(schema.GroupKind{Kind: "Service"}, svc.Name, nil)
	}
	next := cur.DeepCopy()
	next.Status = *svc.Status.DeepCopy()
	next.Annotations = maps.Clone(svc.Annotations)
	next.ResourceVersion = a.nextRV()
	svc.ResourceVersion = next.ResourceVersion
	a.w.logf("apiserver: %s lands on %s: ingress %v (rv %s)", by, key, porticov1.IngressAddrs(next), next.ResourceVersion)
	a.store(key, next, d, by)
	return nil
}

// updatePoolStatus stores a pool's status, as the pool reconciler writes it.
func (a *apiserver) updatePoolStatus(pool *porticov1.IPAddressPool, by string) error {
	cur, ok := a.pools[pool.Name]
	if !ok {
		return apierrors.NewNotFound(poolResource, pool.Name)
	}
	if cur.ResourceVersion != pool.ResourceVersion {
		return apierrors.NewConflict(poolResource, pool.Name, fmt.Errorf("the object has been modified"))
	}
	next := cur.DeepCopy()
	next.Status = *pool.Status.DeepCopy()
	next.ResourceVersion = a.nextRV()
	pool.ResourceVersion = next.ResourceVersion
	a.w.logf("apiserver: %s lands: %d holds (rv %s)", by, len(next.Status.Holds), next.ResourceVersion)
	if len(next.Status.Holds) < len(cur.Status.Holds) {
		a.w.logf("%s ends holds: %d left", pool.Name, len(next.Status.Holds))
	}
	a.pools[pool.Name] = next
	a.notifyPools(pool.Name)
	return nil
}

// store replaces a stored Service, checks the invariants on the change, and tells the watches.
// d is nil for a user's edit.
func (a *apiserver) store(key string, svc *corev1.Service, d *decision, by string) {
	before := porticov1.IngressAddrs(a.services[key])
	a.services[key] = svc
	a.writer[key] = "user"
	if d != nil {
		a.writer[key] = d.replica
	}
	a.checkChange(key, before, porticov1.IngressAddrs(svc), d, by)
	a.notify(key, svc)
}

// get reads a Service as stored now.
func (a *apiserver) get(key string) (*corev1.Service, bool) {
	svc, ok := a.services[key]
	if !ok {
		return nil, false
	}
	return svc.DeepCopy(), true
}

// list is every Service as stored now, by key. A stored object is never changed, only
// replaced, so readers share it: none of them writes to what it reads (as with an informer's
// cache).
func (a *apiserver) list() []*corev1.Service {
	out := make([]*corev1.Service, 0, len(a.services))
	for _, k := range slices.Sorted(maps.Keys(a.services)) {
		out = append(out, a.services[k])
	}
	return out
}

// setPool creates or replaces a pool (its generation moves on).
func (a *apiserver) setPool(name string, ranges ...string) {
	p := &porticov1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if old, ok := a.pools[name]; ok {
		p.Generation, p.Status = old.Generation, old.Status
	}
	p.Generation++
	for _, r := range ranges {
		p.Spec.Addresses = append(p.Spec.Addresses, porticov1.AddressRange(r))
	}
	if name == "home" && a.w.opts.AddressHolds {
		p.Spec.AddressHold = &porticov1.AddressHold{Duration: metav1.Duration{Duration: addressHold}}
	}
	if name == "tenant" {
		p.Spec.ServiceAllocation = &porticov1.ServiceAllocation{
			NamespaceSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"team": "b"}}}}
	}
	p.ResourceVersion = a.nextRV()
	a.w.logf("user sets pool %s: %v", name, ranges)
	a.pools[name] = p
	a.notifyPools(name)
}

func (a *apiserver) deletePool(name string) {
	if _, ok := a.pools[name]; !ok {
		return
	}
	a.w.logf("user deletes pool %s", name)
	delete(a.pools, name)
	a.notifyPools(name)
}

// poolList is every pool as stored now, by name.
func (a *apiserver) poolList() []porticov1.IPAddressPool {
	out := make([]porticov1.IPAddressPool, 0, len(a.pools))
	for _, n := range slices.Sorted(maps.Keys(a.pools)) {
		out = append(out, *a.pools[n]) // shared, as list's
	}
	return out
}

func (a *apiserver) notify(key string, svc *corev1.Service) {
	for _, r := range a.watchers {
		r.watch(watchEvent{key: key, svc: svc}) // shared, as list's
	}
}

// notifyPools sends the pools, as a relist of them would, and the one that changed: its watch
// event.
func (a *apiserver) notifyPools(changed string) {
	pools := a.poolList()
	for _, r := range a.watchers {
		r.watch(watchEvent{pool: true, pools: pools, key: changed})
	}
}

// acquire takes or renews the Lease for who, when it is free, expired by who's observation
// (observedAt: when who last saw it change) or who's already.
func (a *apiserver) acquire(who string, observedAt time.Duration) bool {
	l := a.lease
	if l.holder != "" && l.holder != who && observedAt+leaseDuration > a.w.now {
		return false
	}
	a.lease = lease{holder: who, renew: a.w.now}
	return true
}

// labelNamespace sets a namespace's team label, as a user does.
func (a *apiserver) labelNamespace(name, team string) {
	if a.namespaces[name]["team"] == team {
		return
	}
	a.namespaces[name] = map[string]string{"team": team}
	a.w.logf("user labels namespace %s team=%s", name, team)
	labels := a.namespaceLabels()
	for _, r := range a.watchers {
		r.watch(watchEvent{namespaces: labels, namespace: name})
	}
}

// namespaceLabels is every namespace's labels as stored now.
func (a *apiserver) namespaceLabels() map[string]map[string]string {
	out := make(map[string]map[string]string, len(a.namespaces))
	for n, l := range a.namespaces {
		out[n] = maps.Clone(l)
	}
	return out
}
