package chart_test

import (
	"sort"
	"strings"
	"testing"

	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/portico-lb/portico/config/policycheck"
	"github.com/portico-lb/portico/internal/controlplane"
	"github.com/portico-lb/portico/internal/kube"
)

// TestChartPolicies applies the chart's rendering (the real Helm engine, as `helm template`
// renders it, with a BGP peer whose password is a Secret and one more Secret named in
// speaker.secretNames) to a real apiserver authorizing with RBAC, and runs on it the checks
// config runs on the shipped manifests (config/policycheck), each request made with a token
// bound to a pod on a node.
func TestChartPolicies(t *testing.T) {
	controlplane.QuietLogs()
	cp := controlplane.StartFor(t, controlplane.Options{APIServerArgs: map[string]string{"authorization-mode": "RBAC"}})
	kubectl(t, cp, "", "create", "namespace", namespace)
	files := renderFiles(t, map[string]any{
		"bgp": map[string]any{"peers": []any{map[string]any{"name": "tor-a", "myASN": 64512, "peerASN": 64501,
			"peerAddress": "198.51.100.1", "passwordSecret": map[string]any{"namespace": namespace, "name": "tor-a-password"}}}},
		"speaker": map[string]any{"secretNames": []any{"bfd-key"}},
	})
	var names []string
	for name := range files {
		if strings.HasSuffix(name, ".yaml") {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var stream strings.Builder
	for _, name := range names {
		stream.WriteString("---\n" + files[name] + "\n")
	}
	kubectl(t, cp, stream.String(), "apply", "--server-side", "-f", "-")

	scheme, err := kube.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	admin, err := crclient.New(cp.Config, crclient.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	in := policycheck.Install{Config: cp.Config, Client: admin, Namespace: namespace}
	t.Run("SpeakerCreatesOnlyTheGossipKey", func(t *testing.T) { policycheck.SpeakerCreatesOnlyTheGossipKey(t, in) })
	t.Run("SpeakerReadsOnlyItsSecrets", func(t *testing.T) { policycheck.SpeakerReadsOnlyItsSecrets(t, in, "tor-a-password", "bfd-key") })
	t.Run("SpeakerWritesOnlyItsOwnLease", func(t *testing.T) { policycheck.SpeakerWritesOnlyItsOwnLease(t, in) })
	t.Run("LeaderFenceHoldsWhenTheMachineStops", func(t *testing.T) { policycheck.LeaderFenceHoldsWhenTheMachineStops(t, in) })
	t.Run("FenceWaitsForTheAPIServer", func(t *testing.T) { policycheck.FenceWaitsForTheAPIServer(t, in) })
}
