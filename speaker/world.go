package speaker

import (
	"context"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/rules"
	"github.com/portico-lb/portico/speaker/l2"
	"github.com/portico-lb/portico/speaker/plan"
)

// reads is what the plan reads besides the cache, kept between passes: the loop, the
// self-check and the conflict prober all read the world, from their own goroutines.
type reads struct {
	secrets   secretCache                    // the BGPPeers' password Secrets (secrets.go)
	vrfAbsent atomic.Bool                    // a BGPPeer names a VRF device this node lacks
	cordons   cordons                        // when each cordoned node was first seen cordoned
	subnets   atomic.Pointer[[]netip.Prefix] // where this node can answer (subnets.go); nil: not followed
}

// world lists everything the plan reads from the cache, and the BGPPeers' password Secrets.
func (s *Speaker) world(ctx context.Context) (plan.World, error) {
	var w plan.World
	var svcs corev1.ServiceList
	var eps discoveryv1.EndpointSliceList
	var nodes corev1.NodeList
	var ads v1alpha1.L2AdvertisementList
	var pools v1alpha1.IPAddressPoolList
	var peers v1alpha1.BGPPeerList
	var bgpAds v1alpha1.BGPAdvertisementList
	var bfdProfiles v1alpha1.BFDProfileList
	now := time.Now()
	var speakers v1alpha1.SpeakerList
	for _, l := range []runtime.Object{&svcs, &eps, &nodes, &ads, &pools, &peers, &bgpAds, &bfdProfiles, &speakers} {
		// The plan only reads the objects: no deep copy of every Service on every change.
		if err := s.Cache.List(ctx, l); err != nil {
			return w, err
		}
	}
	// This node's subnets too come from its status, as the others read them (speakersHandler).
	subnets := rules.SubnetsOf(speakers.Items)
	names := make([]string, 0, len(speakers.Items))
	for i := range speakers.Items {
		names = append(names, speakers.Items[i].Name)
	}
	return plan.World{Subnets: subnets, Holders: rules.HoldersOf(speakers.Items), Speakers: names, BalanceSettle: s.L2BalanceSettle, MembersSince: time.Unix(0, s.inbox.joinedAt.Load()), Services: svcs.Items, EndpointSlices: eps.Items, Nodes: nodes.Items, Advertisements: ads.Items, Pools: pools.Items,
		BGPPeers: peers.Items, BGPAds: bgpAds.Items, BFDProfiles: bfdProfiles.Items, Secrets: s.reads.secrets.read(ctx, s.Client, s.Log, secretRefs(peers.Items, bfdProfiles.Items)), IgnoreExcludeLabel: s.IgnoreExcludeLabel, IgnoreClassless: s.IgnoreClassless,
		VRFs: s.vrfs(peers.Items), Now: now, CordonedSince: s.reads.cordons.observe(nodes.Items, now), DrainGrace: s.DrainGrace}, nil
}

// changedServices reads the Services named by keys and their EndpointSlices from the cache (a
// key it does not find was deleted).
func (s *Speaker) changedServices(ctx context.Context, keys []string) ([]corev1.Service, []discoveryv1.EndpointSlice, error) {
	svcs := make([]corev1.Service, 0, len(keys))
	var eps []discoveryv1.EndpointSlice
	for _, key := range keys {
		ns, name, _ := strings.Cut(key, "/")
		var svc corev1.Service
		if err := s.Cache.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &svc); err != nil {
			if !apierrors.IsNotFound(err) {
				return nil, nil, err
			}
			continue
		}
		svcs = append(svcs, svc)
		if svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal {
			continue // only Local Services read their endpoints
		}
		for _, sliceName := range s.inbox.pending.slicesOf(key) {
			var es discoveryv1.EndpointSlice
			if err := s.Cache.Get(ctx, types.NamespacedName{Namespace: ns, Name: sliceName}, &es); err != nil && !apierrors.IsNotFound(err) {
				return nil, nil, err
			} else if err == nil {
				eps = append(eps, es)
			}
		}
	}
	return svcs, eps, nil
}

// vrfs reads the names of this node's VRF devices when a BGPPeer names one (nil otherwise, or
// when the links cannot be read: the plan then does not check), and notes whether one named is
// missing, so the periodic refresh re-plans until it appears.
func (s *Speaker) vrfs(peers []v1alpha1.BGPPeer) map[string]bool {
	var named []string
	for i := range peers {
		if v := peers[i].Spec.VRF; v != "" {
			named = append(named, v)
		}
	}
	if len(named) == 0 {
		s.reads.vrfAbsent.Store(false)
		return nil
	}
	links, err := l2.ReadLinks()
	if err != nil {
		s.Log.Error(err, "reading the node's VRF devices")
		return nil
	}
	have := map[string]bool{}
	for _, l := range links {
		if l.Kind == "vrf" {
			have[l.Name] = true
		}
	}
	absent := false
	for _, v := range named {
		absent = absent || !have[v]
	}
	s.reads.vrfAbsent.Store(absent)
	return have
}

// cordons remembers when this speaker first saw each node cordoned (plan.World.CordonedSince):
// the Node object does not say when spec.unschedulable was set. A speaker that starts on a
// cordoned node starts its grace again.
type cordons struct {
	mu    sync.Mutex // the loop, the self-check and the conflict prober all read the world
	since map[string]time.Time
	wake  alarm // plans everything again when the next grace ends
}

// observe stamps the nodes cordoned as plan.CordonedSince says and returns the stamps (the
// plan only reads them).
func (c *cordons) observe(nodes []corev1.Node, now time.Time) map[string]time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.since = plan.CordonedSince(c.since, nodes, now)
	return c.since
}

// wakeAt has fire called at t (the plan's ReplanAt), replacing the wake-up set before; a zero t
// sets none.
func (c *cordons) wakeAt(t time.Time, fire func()) { c.wake.at(t, fire) }
