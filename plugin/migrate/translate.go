package migrate

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

// Group is MetalLB's API group.
const Group = "metallb.io"

// Problem is one thing the translation could not carry over (or carried over with a caveat).
type Problem struct {
	Object string // "BGPPeer metallb-system/tor (metallb.io/v1beta2)"
	Field  string // "spec.bfdProfile"; empty when it is about the whole object
	Reason string
}

func (p Problem) String() string {
	if p.Field == "" {
		return p.Object + ": " + p.Reason
	}
	return p.Object + " " + p.Field + ": " + p.Reason
}

// Result is the translation of a set of MetalLB objects.
type Result struct {
	// Objects are Portico's objects, in the order to apply them.
	Objects []client.Object
	// NotTranslated lists every object or field left behind, with why.
	NotTranslated []Problem
	// Notes are steps to take by hand for what was translated (e.g. a Secret to copy).
	Notes []Problem
}

// Options of a translation.
type Options struct {
	// Namespace is where Portico runs (default portico-system): the speakers read BGP
	// password Secrets only there.
	Namespace string
}

// Translate maps MetalLB objects to Portico's. Objects of other groups, and MetalLB kinds
// with no Portico equivalent, are listed in NotTranslated.
func Translate(objs []*unstructured.Unstructured, opts Options) Result {
	if opts.Namespace == "" {
		opts.Namespace = "portico-system"
	}
	t := &translator{opts: opts, aliases: map[string]string{}, names: map[string]string{}}
	// Community objects only name values; collect them first, whatever the input order.
	for _, o := range objs {
		if isMetalLB(o) && o.GetKind() == "Community" {
			t.community(o)
		}
	}
	for _, o := range sorted(objs) {
		t.object(o)
	}
	return t.out
}

type translator struct {
	opts    Options
	out     Result
	aliases map[string]string // community alias → value
	names   map[string]string // "Kind/name" → the MetalLB object that took it
}

func isMetalLB(o *unstructured.Unstructured) bool {
	group, _, _ := strings.Cut(o.GetAPIVersion(), "/")
	return group == Group
}

// kindOrder is the order objects are written in: what others refer to comes first.
var kindOrder = []string{"Community", "IPAddressPool", "BFDProfile", "BGPPeer", "L2Advertisement", "BGPAdvertisement"}

func sorted(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	out := slices.Clone(objs)
	rank := func(o *unstructured.Unstructured) int {
		if i := slices.Index(kindOrder, o.GetKind()); i >= 0 && isMetalLB(o) {
			return i
		}
		return len(kindOrder)
	}
	slices.SortStableFunc(out, func(a, b *unstructured.Unstructured) int {
		if d := rank(a) - rank(b); d != 0 {
			return d
		}
		return strings.Compare(a.GetNamespace()+"/"+a.GetName(), b.GetNamespace()+"/"+b.GetName())
	})
	return out
}

func (t *translator) whole(o *unstructured.Unstructured, reason string) {
	t.out.NotTranslated = append(t.out.NotTranslated, Problem{Object: describe(o), Reason: reason})
}

func (t *translator) object(o *unstructured.Unstructured) {
	if !isMetalLB(o) {
		if o.GetKind() == "ConfigMap" && o.GetAPIVersion() == "v1" {
			t.whole(o, "MetalLB's ConfigMap configuration (before v0.13) is not read: convert it to metallb.io objects first (MetalLB's configmaptocrs), then migrate those")
			return
		}
		t.whole(o, "not a MetalLB object (group "+Group+"); ignored")
		return
	}
	switch o.GetKind() {
	case "Community":
		return // inlined into BGPAdvertisements
	case "IPAddressPool":
		t.pool(o)
	case "L2Advertisement":
		t.l2(o)
	case "BGPAdvertisement":
		t.bgpAdvertisement(o)
	case "BGPPeer":
		t.peer(o)
	case "BFDProfile":
		t.bfdProfile(o)
	case "ServiceL2Status", "ServiceBGPStatus", "ConfigurationState":
		t.whole(o, "status written by MetalLB, nothing to migrate: Portico reports the same in Speaker objects and Service conditions")
	default:
		t.whole(o, "no Portico equivalent for this MetalLB kind")
	}
}

// meta gives the Portico object its name and labels (selectors match labels), or reports a
// name already taken: Portico's objects are cluster-scoped, MetalLB's namespaced.
func (t *translator) meta(o *unstructured.Unstructured, kind string) (metav1.ObjectMeta, bool) {
	key := kind + "/" + o.GetName()
	if prev, taken := t.names[key]; taken {
		t.whole(o, fmt.Sprintf("Portico's %s objects are cluster-scoped and %s already takes the name %q: rename one in the input", kind, prev, o.GetName()))
		return metav1.ObjectMeta{}, false
	}
	t.names[key] = describe(o)
	return metav1.ObjectMeta{Name: o.GetName(), Labels: o.GetLabels()}, true
}

func (t *translator) add(o client.Object, kind string) {
	o.GetObjectKind().SetGroupVersionKind(porticov1.GroupVersion.WithKind(kind))
	t.out.Objects = append(t.out.Objects, o)
}

func (t *translator) pool(o *unstructured.Unstructured) {
	f := newFields(o, &t.out)
	p := &porticov1.IPAddressPool{}
	var ok bool
	if p.ObjectMeta, ok = t.meta(o, "IPAddressPool"); !ok {
		return
	}
	var addrs []string
	if !f.take("addresses", &addrs) || len(addrs) == 0 {
		t.whole(o, "spec.addresses is empty: nothing to translate")
		return
	}
	for _, a := range addrs {
		// MetalLB accepts "a - b"; Portico's canonical spelling has no spaces.
		if from, to, isRange := strings.Cut(a, "-"); isRange {
			a = strings.TrimSpace(from) + "-" + strings.TrimSpace(to)
		}
		a = strings.TrimSpace(a)
		// MetalLB masks a CIDR's host bits away; Portico refuses them, so write the network
		// MetalLB really used.
		if pfx, err := netip.ParsePrefix(a); err == nil && pfx != pfx.Masked() {
			t.out.Notes = append(t.out.Notes, Problem{Object: describe(o), Field: "spec.addresses",
				Reason: fmt.Sprintf("%s has host bits set; written as %s, the addresses MetalLB used (write a range to start elsewhere)", a, pfx.Masked())})
			a = pfx.Masked().String()
		}
		p.Spec.Addresses = append(p.Spec.Addresses, porticov1.AddressRange(a))
	}
	f.take("autoAssign", &p.Spec.AutoAssign)
	f.take("avoidBuggyIPs", &p.Spec.AvoidBuggyIPs)
	var sa porticov1.ServiceAllocation
	if f.take("serviceAllocation", &sa) {
		p.Spec.ServiceAllocation = &sa
	}
	f.rest()
	t.add(p, "IPAddressPool")
}

func (t *translator) l2(o *unstructured.Unstructured) {
	f := newFields(o, &t.out)
	a := &porticov1.L2Advertisement{}
	var ok bool
	if a.ObjectMeta, ok = t.meta(o, "L2Advertisement"); !ok {
		return
	}
	f.take("ipAddressPools", &a.Spec.IPAddressPools)
	f.take("ipAddressPoolSelectors", &a.Spec.IPAddressPoolSelectors)
	f.take("nodeSelectors", &a.Spec.NodeSelectors)
	f.take("interfaces", &a.Spec.Interfaces)
	f.take("serviceSelectors", &a.Spec.ServiceSelectors)
	var prefs []porticov1.PreferredNodeSelector
	f.take("preferredNodeSelectors", &prefs)
	for i, p := range prefs {
		if len(p.Preference.MatchLabels) == 0 && len(p.Preference.MatchExpressions) == 0 {
			f.skip(fmt.Sprintf("preferredNodeSelectors[%d]", i), "an empty preference matches every node and changes no election (Portico refuses it)")
			continue
		}
		a.Spec.PreferredNodeSelectors = append(a.Spec.PreferredNodeSelectors, p)
	}
	f.rest()
	t.add(a, "L2Advertisement")
}

func (t *translator) community(o *unstructured.Unstructured) {
	f := newFields(o, &t.out)
	var cs []struct{ Name, Value string }
	f.take("communities", &cs)
	for _, c := range cs {
		if prev, dup := t.aliases[c.Name]; dup && prev != c.Value {
			f.skip("communities", fmt.Sprintf("alias %q is defined twice (%s and %s); the first is used", c.Name, prev, c.Value))
			continue
		}
		t.aliases[c.Name] = c.Value
	}
	f.rest()
}

// isCommunity says whether s is a community value Portico accepts (rather than an alias).
func isCommunity(s string) bool {
	_, err := porticov1.Community(s).Parse()
	return err == nil
}

func (t *translator) bgpAdvertisement(o *unstructured.Unstructured) {
	f := newFields(o, &t.out)
	a := &porticov1.BGPAdvertisement{}
	var ok bool
	if a.ObjectMeta, ok = t.meta(o, "BGPAdvertisement"); !ok {
		return
	}
	f.take("ipAddressPools", &a.Spec.IPAddressPools)
	f.take("ipAddressPoolSelectors", &a.Spec.IPAddressPoolSelectors)
	f.take("aggregationLength", &a.Spec.AggregationLength)
	f.take("aggregationLengthV6", &a.Spec.AggregationLengthV6)
	var pref uint32
	if f.take("localPref", &pref) && pref != 0 { // 0 is MetalLB's "unset"
		a.Spec.LocalPref = &pref
	}
	var comms []string
	f.take("communities", &comms)
	for i, c := range comms {
		if v, isAlias := t.aliases[c]; isAlias && !isCommunity(c) {
			c = v
		}
		if !isCommunity(c) {
			f.skip(fmt.Sprintf("communities[%d]", i), fmt.Sprintf("%q is neither a community value nor an alias defined in the Community objects given (include them with -f)", c))
			continue
		}
		a.Spec.Communities = append(a.Spec.Communities, porticov1.Community(c))
	}
	f.take("peers", &a.Spec.Peers)
	f.take("nodeSelectors", &a.Spec.NodeSelectors)
	f.take("serviceSelectors", &a.Spec.ServiceSelectors)
	f.rest()
	t.add(a, "BGPAdvertisement")
}

// everyFamily is why MetalLB's address-family switches have no Portico field: the speaker
// enables IPv4 and IPv6 unicast on every session, and a route of the other family than the
// session's carries the node's address of that family as next hop.
const everyFamily = "not configurable: Portico carries IPv4 and IPv6 routes on every session (both families enabled)"
