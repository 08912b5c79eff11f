package election

import (
	"fmt"
	"sort"
	"strings"
)

// Candidate is what the speaker knows about one node when it decides who may answer for one
// Service's address.
type Candidate struct {
	Name string
	// Alive: the node's speaker is a live member of the gossip group.
	Alive bool
	// Selected: the L2Advertisement's nodeSelectors match the node (true when it has none).
	Selected bool
	// Excluded: the node carries node.kubernetes.io/exclude-from-external-load-balancers.
	Excluded bool
	// NotReady: the node's Ready condition is False or Unknown (its kubelet is gone or
	// failing); NetworkUnavailable: its NetworkUnavailable condition is True (the CNI has not
	// set up its network). Traffic sent there would be lost.
	NotReady, NetworkUnavailable bool
	// OutOfService: the node carries the node.kubernetes.io/out-of-service taint (shut down or
	// cut off, as its administrator says), whatever its conditions say.
	OutOfService bool
	// Cordoned: the node is unschedulable, as `kubectl drain` makes it before it evicts the
	// pods. It answers only when no other node may, so a drain moves its addresses while its
	// speaker still runs, and a single-node cluster keeps them.
	Cordoned bool
	// LocalEndpoint: the node holds a ready endpoint of the Service.
	LocalEndpoint bool
	// LocalServing: the node holds an endpoint of the Service whose pod terminates and still
	// serves (evicted by a drain), which kube-proxy sends the node's traffic to while it holds
	// no ready one. Under LocalOnly such a node (without LocalEndpoint) answers only when no
	// node with a ready endpoint may, so the address stays where its connections are served
	// until a replacement is ready.
	LocalServing bool
	// Weight is the sum of the L2Advertisements' preferredNodeSelectors weights the node
	// matches: among eligible nodes, the heaviest answer (Preferred).
	Weight int32
}

// Policy is the part of the Service that changes who may answer.
type Policy struct {
	// LocalOnly is externalTrafficPolicy: Local; then only nodes with a ready endpoint answer,
	// because the others would drop the traffic.
	LocalOnly bool
}

// Eligible returns the sorted names of the candidates that may answer, and, when none may, a
// reason that names what excluded them (for the Service's Announced condition).
func Eligible(cands []Candidate, p Policy) (names []string, whyNone string) {
	var dead, unselected, excluded, notReady, noNetwork, outOfService, noEndpoint, cordoned, terminating []string
	for _, c := range cands {
		switch {
		case !c.Alive:
			dead = append(dead, c.Name)
		case !c.Selected:
			unselected = append(unselected, c.Name)
		case c.Excluded:
			excluded = append(excluded, c.Name)
		case c.NetworkUnavailable:
			noNetwork = append(noNetwork, c.Name)
		case c.NotReady:
			notReady = append(notReady, c.Name)
		case c.OutOfService:
			outOfService = append(outOfService, c.Name)
		case p.LocalOnly && !c.LocalEndpoint && c.LocalServing:
			terminating = append(terminating, c.Name)
		case p.LocalOnly && !c.LocalEndpoint:
			noEndpoint = append(noEndpoint, c.Name)
		case c.Cordoned:
			cordoned = append(cordoned, c.Name)
		default:
			names = append(names, c.Name)
		}
	}
	if len(names) == 0 {
		names = cordoned // a last resort: better a node being drained than none
	}
	if len(names) == 0 {
		names = terminating // the last: its only endpoints are going, but serve until then
	}
	sort.Strings(names)
	if len(names) > 0 {
		return names, ""
	}
	if len(cands) == 0 {
		return nil, "no speaker is running"
	}
	var parts []string
	add := func(what string, nodes []string) {
		if len(nodes) > 0 {
			sort.Strings(nodes)
			parts = append(parts, fmt.Sprintf("%s: %s", what, strings.Join(nodes, ",")))
		}
	}
	add("speaker not alive", dead)
	add("not matched by nodeSelectors", unselected)
	add("labelled node.kubernetes.io/exclude-from-external-load-balancers", excluded)
	add("condition NetworkUnavailable True", noNetwork)
	add("not Ready", notReady)
	add("tainted node.kubernetes.io/out-of-service", outOfService)
	add("no ready local endpoint (externalTrafficPolicy Local)", noEndpoint)
	why := "no eligible node (" + strings.Join(parts, "; ") + ")"
	if len(excluded) > 0 {
		// Single-node and control-plane-only clusters carry the label on every node.
		why += "; speakers run with --ignore-exclude-lb-label announce from labelled nodes"
	}
	return nil, why
}
