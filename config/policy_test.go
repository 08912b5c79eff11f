package config_test

import (
	"context"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/config/policycheck"
)

// nodeNameExtra is where the apiserver puts the node of the pod a ServiceAccount token is
// bound to.
const nodeNameExtra = "authentication.kubernetes.io/node-name"

// podNameExtra is where it puts the pod's name.
const podNameExtra = "authentication.kubernetes.io/pod-name"

// The policy's two messages, as a refused request carries them.
const noNodeName = "portico-speaker's request carries no node name"

func notOwnSpeaker(node, speaker string) string {
	return "portico-speaker on node " + node + " may write only Speaker " + node + ", not Speaker " + speaker
}

// asUser is a client acting as a ServiceAccount, with a node name in its user extra info
// as a pod-bound token gives (none when node is empty).
func asUser(t *testing.T, user, node string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: saGroups}
	if node != "" {
		cfg.Impersonate.Extra = map[string][]string{nodeNameExtra: {node}}
	}
	c, err := client.New(cfg, client.Options{Scheme: cp.Scheme})
	must(t, err)
	return c
}

func speakerObject(name string) *porticov1.Speaker {
	return &porticov1.Speaker{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// wantRefused fails unless err is the policy's refusal carrying message.
func wantRefused(t *testing.T, what string, err error, message string) {
	t.Helper()
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), message) {
		t.Errorf("%s: got %v, want Forbidden with %q", what, err, message)
	}
}

// TestSpeakerWritesOnlyItsOwnSpeaker: with the rendered manifests applied, the
// ValidatingAdmissionPolicy lets a speaker write the Speaker of its own node (the node name
// the apiserver puts in its pod-bound token) and no other, refuses a speaker request with no
// node name, and leaves every other user alone. The first part uses a real token the
// apiserver issues for a speaker pod on a node, the rest impersonation with the same extra.
func TestSpeakerWritesOnlyItsOwnSpeaker(t *testing.T) {
	ctx := context.Background()
	kubectl(t, "apply", "--server-side", "-f", rendered)
	c := cp.Client
	const nodeA, nodeB, nodeC = "policy-node-a", "policy-node-b", "policy-node-c"
	speakerA, anonymous := asUser(t, speakerSA, nodeA), asUser(t, speakerSA, "")
	t.Cleanup(func() {
		for _, n := range []string{nodeA, nodeB, nodeC} {
			_ = c.Delete(ctx, speakerObject(n))
		}
	})

	// A policy is enforced once the apiserver has loaded it: wait for the first refusal (a dry
	// run, so nothing is written while it is not). This also shows that the apiserver runs
	// the ValidatingAdmissionPolicy admission plugin.
	poll(t, "the policy refuses "+nodeA+" creating Speaker "+nodeB, func(ctx context.Context) (bool, error) {
		err := speakerA.Create(ctx, speakerObject(nodeB), client.DryRunAll)
		return apierrors.IsForbidden(err), nil
	})

	// A real speaker pod's token: the apiserver names the pod's node in it.
	in := policycheck.Install{Config: cp.Config, Client: c, Namespace: systemNamespace}
	podToken := in.PodClient(t, "portico-speaker", "speaker-a", nodeA)
	own := speakerObject(nodeA)
	must(t, podToken.Create(ctx, own))
	own.Status.BGPPeersUp = 1
	must(t, podToken.Status().Update(ctx, own))
	wantRefused(t, "the pod's token creating Speaker "+nodeB, podToken.Create(ctx, speakerObject(nodeB)), notOwnSpeaker(nodeA, nodeB))

	// Impersonated with the same extra: the same answers, on every verb the policy covers.
	must(t, c.Create(ctx, speakerObject(nodeB))) // an admin is not subject to the policy
	other := speakerObject(nodeB)
	must(t, c.Get(ctx, client.ObjectKeyFromObject(other), other))
	other.Status.BGPPeersUp = 2
	wantRefused(t, nodeA+" updating Speaker "+nodeB+"'s status", speakerA.Status().Update(ctx, other), notOwnSpeaker(nodeA, nodeB))
	bump := client.RawPatch(types.MergePatchType, []byte(`{"status":{"bgpPeersUp":3}}`))
	wantRefused(t, nodeA+" patching Speaker "+nodeB+"'s status", speakerA.Status().Patch(ctx, other, bump), notOwnSpeaker(nodeA, nodeB))
	must(t, speakerA.Status().Patch(ctx, speakerObject(nodeA), bump))

	// No node name: refused whatever the Speaker.
	wantRefused(t, "a speaker without node name creating Speaker "+nodeC, anonymous.Create(ctx, speakerObject(nodeC)), noNodeName)
	wantRefused(t, "a speaker without node name patching Speaker "+nodeA, anonymous.Status().Patch(ctx, speakerObject(nodeA), bump), noNodeName)

	// Deletes are checked against the object deleted, and other accounts are not subject to
	// the policy: grant both components every Speaker verb for a moment (RBAC gives the speaker
	// no delete and the controller no write at all).
	grantSpeakerWrites(t, speakerSA, controllerSA)
	controller := asUser(t, controllerSA, "")
	poll(t, "the grant takes effect", func(ctx context.Context) (bool, error) {
		return controller.Delete(ctx, speakerObject(nodeB), client.DryRunAll) == nil, nil
	})
	wantRefused(t, nodeA+" deleting Speaker "+nodeB, speakerA.Delete(ctx, speakerObject(nodeB), client.DryRunAll), notOwnSpeaker(nodeA, nodeB))
	must(t, speakerA.Delete(ctx, speakerObject(nodeA), client.DryRunAll))
	must(t, controller.Status().Patch(ctx, speakerObject(nodeB), bump))
	must(t, controller.Create(ctx, speakerObject(nodeC), client.DryRunAll))
}

// grantSpeakerWrites binds a ClusterRole with every write on Speakers to users, until the test ends.
func grantSpeakerWrites(t *testing.T, users ...string) {
	t.Helper()
	ctx, c := context.Background(), cp.Client
	meta := metav1.ObjectMeta{Name: "policy-test-speaker-writes"}
	role := &rbacv1.ClusterRole{ObjectMeta: meta, Rules: []rbacv1.PolicyRule{{APIGroups: []string{"portico.dev"},
		Resources: []string{"speakers", "speakers/status"}, Verbs: []string{"create", "update", "patch", "delete"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: meta, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: meta.Name}}
	for _, u := range users {
		ns, name, _ := strings.Cut(strings.TrimPrefix(u, "system:serviceaccount:"), ":")
		binding.Subjects = append(binding.Subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name})
	}
	must(t, c.Create(ctx, role))
	must(t, c.Create(ctx, binding))
	t.Cleanup(func() {
		must(t, c.Delete(ctx, binding))
		must(t, c.Delete(ctx, role))
		// Wait until it is gone, for the tests that check what the components may not do.
		for _, u := range users {
			poll(t, "the grant to "+short(u)+" is withdrawn", func(ctx context.Context) (bool, error) {
				sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: u, Groups: saGroups,
					ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "delete", Group: "portico.dev", Resource: "speakers"}}}
				err := c.Create(ctx, sar)
				return err == nil && !sar.Status.Allowed, err
			})
		}
	})
}

// install is the rendered manifests as applied to the control plane.
func install(t *testing.T) policycheck.Install {
	kubectl(t, "apply", "--server-side", "-f", rendered)
	return policycheck.Install{Config: cp.Config, Client: cp.Client, Namespace: systemNamespace}
}

// TestSpeakerWritesOnlyItsOwnLease: a speaker's pod-bound token creates, updates, patches and
// deletes the Lease of its own node and no other, not the controller's leader Lease either.
func TestSpeakerWritesOnlyItsOwnLease(t *testing.T) {
	policycheck.SpeakerWritesOnlyItsOwnLease(t, install(t))
}

// TestSpeakerCreatesOnlyTheGossipKey: RBAC lets the speakers create Secrets in their namespace
// (the first one makes the gossip key) but cannot say which; the admission policy admits only
// portico-memberlist as the speaker makes it, and leaves other users alone.
func TestSpeakerCreatesOnlyTheGossipKey(t *testing.T) {
	policycheck.SpeakerCreatesOnlyTheGossipKey(t, install(t))
}

// TestSpeakerReadsOnlyItsSecrets: a speaker reads the gossip key and no other Secret of its
// namespace (the manifests name no BGP password: a user grants those, docs/security.md).
func TestSpeakerReadsOnlyItsSecrets(t *testing.T) {
	policycheck.SpeakerReadsOnlyItsSecrets(t, install(t))
}

// TestLeaderFenceHoldsWhenTheMachineStops: a controller replica whose machine stopped (its
// fence's clock frozen past the lease) while another took over is refused by the apiserver
// (portico-controller-leader-only), not by its own clock; the new leader's first writes land.
func TestLeaderFenceHoldsWhenTheMachineStops(t *testing.T) {
	policycheck.LeaderFenceHoldsWhenTheMachineStops(t, install(t))
}

// TestFenceWaitsForTheAPIServer: a new leader's fence rises only once the apiserver admits its
// writes (its copy of the Lease names the leader's pod).
func TestFenceWaitsForTheAPIServer(t *testing.T) {
	policycheck.FenceWaitsForTheAPIServer(t, install(t))
}
