package rules

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// TestRouterIDs runs testdata/routerid.txt: "choose" lists one node a line,
//
//	NAME [created=MINUTES] [label=VALUE] [ips=A,B]
//
// (created: minutes after an arbitrary start, 0 by default; label: its
// portico.dev/bgp-router-id label; ips: its InternalIPs) and prints each node's router ID,
// where it comes from, and the problem, if any, its Speaker status reports.
func TestRouterIDs(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	datadriven.RunTest(t, "testdata/routerid.txt", func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd != "choose" {
			t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
		}
		var nodes []corev1.Node
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			f := strings.Fields(line)
			n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: f[0], CreationTimestamp: metav1.NewTime(start)}}
			for _, arg := range f[1:] {
				key, value, _ := strings.Cut(arg, "=")
				switch key {
				case "created":
					minutes, err := strconv.Atoi(value)
					if err != nil {
						t.Fatalf("%s: %v", d.Pos, err)
					}
					n.CreationTimestamp = metav1.NewTime(start.Add(time.Duration(minutes) * time.Minute))
				case "label":
					n.Labels = map[string]string{v1alpha1.LabelBGPRouterID: value}
				case "ips":
					for _, ip := range strings.Split(value, ",") {
						n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
					}
				default:
					t.Fatalf("%s: unknown argument %q", d.Pos, arg)
				}
			}
			nodes = append(nodes, n)
		}
		ids := RouterIDs(nodes)
		var b strings.Builder
		for _, name := range slices.Sorted(maps.Keys(ids)) {
			id := ids[name]
			fmt.Fprintf(&b, "%s: %s (%s)\n", name, id.ID, id.Source)
			if id.Problem != "" {
				fmt.Fprintf(&b, "  problem: %s\n", id.Problem)
			}
		}
		return b.String()
	})
}

// TestRouterIDsUniqueAtScale: 5000 IPv6-only nodes named as a cloud names them get 5000
// distinct router IDs, none in a block routers refuse, and the same table whatever the order
// the nodes are listed in.
func TestRouterIDsUniqueAtScale(t *testing.T) {
	var nodes []corev1.Node
	for i := range 5000 {
		nodes = append(nodes, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ip-2001-db8-%x.ec2.internal", i)},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("2001:db8::%x", i)}}}})
	}
	ids := RouterIDs(nodes)
	seen := map[string]string{}
	for name, id := range ids {
		b := id.ID.As4()
		if id.Source != RouterIDDerived || id.Problem != "" || b[0] == 0 || b[0] == 127 || b[0] >= 224 {
			t.Fatalf("%s: %+v", name, id)
		}
		if other, dup := seen[id.ID.String()]; dup {
			t.Fatalf("%s and %s share %s", name, other, id.ID)
		}
		seen[id.ID.String()] = name
	}
	slices.Reverse(nodes)
	for name, id := range RouterIDs(nodes) {
		if ids[name] != id {
			t.Fatalf("%s: %v listed in one order, %v in the other", name, ids[name], id)
		}
	}
}
