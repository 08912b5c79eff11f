package plan_test

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/speaker/plan"
	"github.com/portico-lb/portico/speaker/plan/plantest"
	"github.com/portico-lb/portico/speaker/status"
)

// TestBGPTranscripts runs testdata/bgp/*.txt: what one node advertises over BGP, computed from
// cluster objects. Commands:
//
//	apply        YAML documents (separated by ---) of Node, Service, EndpointSlice,
//	             IPAddressPool, BGPPeer, BGPAdvertisement, BFDProfile or Secret; an object replaces the one
//	             of the same kind, namespace and name
//	delete       one "Kind namespace/name" (or "Kind name") per line
//	plan node=N [dead=A,B] [grace=D] [cordoned-for=A:D,B:D] [vrfs=R,B]  the sessions and
//	             routes node N wants, the addresses it reports (", tells": it is the teller;
//	             ", lists routes to P": not the teller, but the first to send the address to
//	             peers P, see BGPClaim), its problems, and when it plans again (World.DrainGrace's
//	             end); with the speakers of the dead nodes gone from the gossip group, a cordoned
//	             node's GRACEFUL_SHUTDOWN lasting grace, the cordoned nodes named seen cordoned for
//	             that long (the others just now); vrfs (vrfs= for none) are the node's VRF devices
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
				var dead string
				if d.HasArg("dead") {
					d.ScanArgs(t, "dead", &dead)
				}
				alive := func(n string) bool { return !slices.Contains(strings.Split(dead, ","), n) }
				w := worldOf(objs, order)
				if d.HasArg("vrfs") { // the node's VRF devices, as the speaker reads them
					var vrfs string
					d.ScanArgs(t, "vrfs", &vrfs)
					w.VRFs = map[string]bool{}
					for _, v := range strings.Split(vrfs, ",") {
						w.VRFs[v] = v != ""
					}
				}
				w.Now = transcriptNow
				if d.HasArg("grace") {
					var grace string
					d.ScanArgs(t, "grace", &grace)
					w.DrainGrace = mustDuration(t, grace)
				}
				if d.HasArg("cordoned-for") {
					var fors string
					d.ScanArgs(t, "cordoned-for", &fors)
					w.CordonedSince = map[string]time.Time{}
					for _, f := range strings.Split(fors, ",") {
						name, dur, _ := strings.Cut(f, ":")
						w.CordonedSince[name] = w.Now.Add(-mustDuration(t, dur))
					}
				}
				return renderBGPPlan(plan.Make(w, node, v1alpha1.DefaultLoadBalancerClass, alive))
			}
			t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
			return ""
		})
	})
}

// transcriptNow is the time the transcripts plan at.
var transcriptNow = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func mustDuration(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
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

func worldOf(objs map[string]any, order []string) plan.World {
	var w plan.World
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

func renderBGPPlan(p plan.Plan) string {
	var b strings.Builder
	b.WriteString(p.BGP.String())
	for _, ip := range slices.SortedFunc(maps.Keys(p.Routed), netip.Addr.Compare) {
		c := p.Routed[ip]
		tells := ""
		if c.Teller {
			tells = ", tells"
		} else if len(c.FirstTo) > 0 {
			tells = ", lists routes to " + strings.Join(c.FirstTo, ", ")
		}
		fmt.Fprintf(&b, "announces %s (%s) to %s%s\n", ip, strings.Join(c.Services, ", "), strings.Join(c.Peers, ", "), tells)
	}
	for _, pr := range p.Problems {
		fmt.Fprintf(&b, "problem: %s\n", pr)
	}
	for _, peer := range slices.Sorted(maps.Keys(p.BFDProblems)) {
		fmt.Fprintf(&b, "no bfd on %s: %s\n", peer, p.BFDProblems[peer].Reason)
	}
	if !p.ReplanAt.IsZero() {
		fmt.Fprintf(&b, "plans again in %v\n", p.ReplanAt.Sub(transcriptNow))
	}
	if b.Len() == 0 {
		return "nothing\n"
	}
	return b.String()
}

// TestBGPStatusListsOnlyTheTeller: of three nodes advertising one address, one lists it and its
// route in its Speaker status, so a Service change rewrites one Speaker, not every advertising
// node's.
func TestBGPStatusListsOnlyTheTeller(t *testing.T) {
	w := plantest.World(plantest.LBService("web", "198.51.100.10"))
	w.Advertisements = nil
	for i := range w.Nodes {
		w.Nodes[i].Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("192.168.0.%d", i+1)}}
	}
	w.BGPPeers = []v1alpha1.BGPPeer{{ObjectMeta: metav1.ObjectMeta{Name: "router"}, Spec: v1alpha1.BGPPeerSpec{MyASN: 64500, PeerASN: 64501, PeerAddress: "192.168.0.254"}}}
	w.BGPAds = []v1alpha1.BGPAdvertisement{{ObjectMeta: metav1.ObjectMeta{Name: "all"}}}
	var listed []string
	for _, n := range plantest.NodeNames {
		p := plan.Make(w, n, v1alpha1.DefaultLoadBalancerClass, plantest.AllAlive)
		if len(p.Routed) != 1 {
			t.Fatalf("%s routes %d addresses, want 1 (%v)", n, len(p.Routed), p.Problems)
		}
		st := status.OfPlan(p, nil).Status
		for _, a := range st.Announcements {
			listed = append(listed, n+" "+a.IP+" "+a.Service)
		}
		for _, r := range st.BGP.Routes {
			listed = append(listed, n+" "+r.Prefix+" to "+strings.Join(r.Peers, ","))
		}
	}
	if want := []string{"node-a 198.51.100.10 ns/web", "node-a 198.51.100.10/32 to router"}; !slices.Equal(listed, want) {
		t.Fatalf("Speaker statuses list %q, want %q", listed, want)
	}
}
