package cluster_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/portico-lb/portico/internal/netlab"
)

// uninstallWithKubectl is the README's uninstall: `kubectl delete -f` of the manifests, until
// their namespace is gone.
func uninstallWithKubectl(e *labEnv) {
	e.kubectl("delete", "-f", e.built.Manifests, "--timeout=3m")
	waitFor(e.t, "namespace portico-system gone", 3*time.Minute, func() (bool, string) {
		var ns corev1.Namespace
		err := e.c.CP.Client.Get(context.Background(), client.ObjectKey{Name: "portico-system"}, &ns)
		return apierrors.IsNotFound(err), fmt.Sprintf("%v, phase %s", err, ns.Status.Phase)
	})
}

// uninstallLeavesNothing moves gitea's address (its speaker's pod deleted) while keep-alive
// connections run through it, so that the node taking it over hands them off (its nftables
// table, routing rule, route and marked connection-tracking entries exist); then uninstalls
// Portico with uninstall: every node's `nft list tables`, `ip rule`, `ip route show table all`
// and conntrack must show nothing of Portico's once its speakers are gone.
func uninstallLeavesNothing(e *labEnv, uninstall func()) {
	t := e.t
	r := measure(e, operationNamed(e, "delete-pod"), gitea, 8)
	t.Logf("the owning speaker's pod deleted: %d failed requests; 8 keep-alive connections: %d failed requests, %d reset; moves %v",
		r.failed, r.kaFailed, r.kaResets, r.moves)
	var handing []string
	for _, n := range e.c.Nodes {
		if state := netlab.HandoffRouting(n.NS); len(state) > 0 {
			handing = append(handing, n.Name+":\n"+strings.Join(state, "\n"))
		}
	}
	if len(handing) == 0 {
		t.Fatal("no node hands connections off after the move: nothing to uninstall")
	}
	t.Logf("before the uninstall:\n%s", strings.Join(handing, "\n"))
	uninstall()
	waitFor(t, "no speaker pod left", 2*time.Minute, func() (bool, string) {
		var pods corev1.PodList
		err := e.c.CP.Client.List(context.Background(), &pods, client.InNamespace("portico-system"), client.MatchingLabels{"app.kubernetes.io/component": "speaker"})
		return err == nil && len(pods.Items) == 0, fmt.Sprintf("%d pods, %v", len(pods.Items), err)
	})
	for _, n := range e.c.Nodes {
		waitFor(t, n.Name+" holds nothing of Portico's", 30*time.Second, func() (bool, string) {
			left := netlab.HandoffState(n.NS, true)
			return left == "", left
		})
		tables, _ := exec.Command("ip", "netns", "exec", n.NS, "nft", "list", "tables").CombinedOutput()
		t.Logf("%s after the uninstall: nft list tables:\n%s", n.Name, tables)
	}
}
