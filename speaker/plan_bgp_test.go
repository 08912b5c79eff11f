package speaker

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/yaml"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// TestBGPTranscripts runs testdata/bgp/*.txt: what one node advertises over BGP, computed from
// cluster objects. Commands:
//
//	apply        YAML documents (separated by ---) of Node, Service, EndpointSlice,
//	             IPAddressPool, BGPPeer, BGPAdvertisement, BFDProfile or Secret; an object replaces the one
//	             of the same kind, namespace and name
//	delete       one "Kind namespace/name" (or "Kind name") per line
//	plan node=N  the sessions and routes node N wants, the addresses it reports, its problems
func TestBGPTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/bgp", func(t *testing.T, path string) {
		objs := map[string]any{} // "Kind ns/name" → object
		var order []string
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "apply":
				for _, doc := range strings.Split(d.Input, "\n---\n") {
					key, obj, err := decodeObject(doc)
					if err != nil {
						return "error: " + err.Error()
					}
					if _, had := objs[key]; !had {
						order = append(order, key)
					}
					objs[key] = obj
				}
				return "ok"
			case "delete":
				for _, key := range strings.Split(strings.TrimSpace(d.Input), "\n") {
					if _, had := objs[key]; !had {
						return "error: no " + key
					}
					delete(objs, key)
					order = slices.DeleteFunc(order, func(k string) bool { return k == key })
				}
				return "ok"
			case "plan":
				var node string
				d.ScanArgs(t, "node", &node)
				return renderBGPPlan(MakePlan(worldOf(objs, order), node, v1alpha1.DefaultLoadBalancerClass, allAlive))
			}
			t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
			return ""
		})
	})
}

func decodeObject(doc string) (string, any, error) {
	var meta struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
		return "", nil, err
	}
	var obj any
	switch meta.Kind {
	case "Node":
		obj = &corev1.Node{}
	case "Service":
		obj = &corev1.Service{}
	case "EndpointSlice":
		obj = &discoveryv1.EndpointSlice{}
	case "Secret":
		obj = &corev1.Secret{}
	case "IPAddressPool":
		obj = &v1alpha1.IPAddressPool{}
	case "BGPPeer":
		obj = &v1alpha1.BGPPeer{}
	case "BGPAdvertisement":
		obj = &v1alpha1.BGPAdvertisement{}
	case "BFDProfile":
		obj = &v1alpha1.BFDProfile{}
	default:
		return "", nil, fmt.Errorf("unknown kind %q", meta.Kind)
	}
	if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
		return "", nil, err
	}
	name := meta.Metadata.Name
	if meta.Metadata.Namespace != "" {
		name = meta.Metadata.Namespace + "/" + name
	}
	return meta.Kind + " " + name, obj, nil
}

func worldOf(objs map[string]any, order []string) World {
	var w World
	for _, key := range order {
		switch o := objs[key].(type) {
		case *corev1.Node:
			w.Nodes = append(w.Nodes, *o)
		case *corev1.Service:
			w.Services = append(w.Services, *o)
		case *discoveryv1.EndpointSlice:
			w.EndpointSlices = append(w.EndpointSlices, *o)
		case *corev1.Secret:
			w.Secrets = append(w.Secrets, *o)
		case *v1alpha1.IPAddressPool:
			w.Pools = append(w.Pools, *o)
		case *v1alpha1.BGPPeer:
			w.BGPPeers = append(w.BGPPeers, *o)
		case *v1alpha1.BGPAdvertisement:
			w.BGPAds = append(w.BGPAds, *o)
		case *v1alpha1.BFDProfile:
			w.BFDProfiles = append(w.BFDProfiles, *o)
		}
	}
	return w
}

func renderBGPPlan(p Plan) string {
	var b strings.Builder
	b.WriteString(p.BGP.String())
	for _, ip := range slices.SortedFunc(maps.Keys(p.Routed), netip.Addr.Compare) {
		c := p.Routed[ip]
		fmt.Fprintf(&b, "announces %s (%s) to %s\n", ip, strings.Join(c.Services, ", "), strings.Join(c.Peers, ", "))
	}
	for _, pr := range p.Problems {
		fmt.Fprintf(&b, "problem: %s\n", pr)
	}
	if b.Len() == 0 {
		return "nothing\n"
	}
	return b.String()
}
