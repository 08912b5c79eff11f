package policycheck

import (
	"context"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/portico-lb/portico/speaker/gossipkey"
)

const (
	speakerSA = "portico-speaker"
	// memberlistSecret is the gossip key Secret a speaker creates when it is missing.
	memberlistSecret = "portico-memberlist"
	// leaderLease is the controller's leader election Lease.
	leaderLease = "portico-controller.portico.dev"
)

// The refusal of portico-speaker-memberlist-only.
const onlyTheGossipKey = "portico-speaker may create only the Secret portico-memberlist: an Opaque Secret holding only the key secretkey, with no annotation"

// SpeakerCreatesOnlyTheGossipKey: a speaker (a pod-bound token) may create portico-memberlist
// only as the Secret gossipkey makes: type Opaque, the one key secretkey, no annotation. In
// particular not as a service-account-token Secret annotated for portico-controller, which a
// kube-controller-manager that signs tokens fills in with the controller's token.
func SpeakerCreatesOnlyTheGossipKey(t *testing.T, in Install) {
	ctx := context.Background()
	speaker := in.PodClient(t, speakerSA, "speaker-secrets", "secrets-node")
	ref := types.NamespacedName{Namespace: in.Namespace, Name: memberlistSecret}
	key := make([]byte, gossipkey.KeyBytes)
	secret := func(mutate func(*corev1.Secret)) *corev1.Secret {
		s := gossipkey.New(ref, key)
		mutate(s)
		return s
	}
	forController := map[string]string{corev1.ServiceAccountNameKey: "portico-controller"}
	refused := []struct {
		what   string
		secret *corev1.Secret
	}{
		{"another name", secret(func(s *corev1.Secret) { s.Name = "bgp-password" })},
		{"a service-account-token Secret annotated for portico-controller", secret(func(s *corev1.Secret) {
			s.Type, s.Annotations, s.Data = corev1.SecretTypeServiceAccountToken, forController, nil
		})},
		{"a Secret of another type", secret(func(s *corev1.Secret) { s.Type = "portico.dev/other" })},
		{"an Opaque Secret annotated for portico-controller", secret(func(s *corev1.Secret) { s.Annotations = forController })},
		{"an Opaque Secret with any annotation", secret(func(s *corev1.Secret) { s.Annotations = map[string]string{"a": "b"} })},
		{"a second key", secret(func(s *corev1.Secret) { s.Data["token"] = []byte("x") })},
		{"no key", secret(func(s *corev1.Secret) { s.Data = nil })},
	}
	// The policy is enforced once the apiserver has loaded it: wait for its first refusal (a
	// dry run, so nothing is stored while it is not).
	poll(t, "the policy refuses the speaker Secret "+refused[0].secret.Name, func(ctx context.Context) bool {
		return apierrors.IsForbidden(speaker.Create(ctx, refused[0].secret.DeepCopy(), client.DryRunAll))
	})
	if err := in.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name}}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	for _, r := range refused {
		wantRefused(t, "the speaker creating "+r.what, speaker.Create(ctx, r.secret, client.DryRunAll), onlyTheGossipKey)
	}
	// An admin is not subject to the policy.
	must(t, in.Client.Create(ctx, refused[1].secret.DeepCopy(), client.DryRunAll))
	// The Secret a speaker makes is admitted, and stored as it was sent.
	must(t, speaker.Create(ctx, secret(func(*corev1.Secret) {})))
	t.Cleanup(func() { _ = in.Client.Delete(context.Background(), secret(func(*corev1.Secret) {})) })
	var stored corev1.Secret
	must(t, in.Client.Get(ctx, ref, &stored))
	if stored.Type != corev1.SecretTypeOpaque || len(stored.Annotations) != 0 || len(stored.Data) != 1 {
		t.Errorf("stored %s: type %s, annotations %v, %d keys", ref, stored.Type, stored.Annotations, len(stored.Data))
	}
}

// SpeakerReadsOnlyItsSecrets: a speaker may get the gossip key and the Secrets named in
// granted (its BGP passwords and BFD keys), and no other Secret of its namespace, such as a
// Helm release or a ServiceAccount token; it may never list or watch them.
func SpeakerReadsOnlyItsSecrets(t *testing.T, in Install, granted ...string) {
	ctx := context.Background()
	speaker := in.PodClient(t, speakerSA, "speaker-reads", "reads-node")
	// A Secret allowed may be missing: NotFound means the speaker was let look.
	readable := func(name string) error {
		err := speaker.Get(ctx, types.NamespacedName{Namespace: in.Namespace, Name: name}, &corev1.Secret{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	for _, name := range append([]string{memberlistSecret}, granted...) {
		wantAllowed(t, "the speaker reading Secret "+name, readable(name))
	}
	for _, name := range []string{"sh.helm.release.v1.portico.v1", "portico-controller-token", "bgp-password-not-granted"} {
		wantRefused(t, "the speaker reading Secret "+name, readable(name), `cannot get resource "secrets"`)
	}
	wantRefused(t, "the speaker listing Secrets", speaker.List(ctx, &corev1.SecretList{}, client.InNamespace(in.Namespace)),
		`cannot list resource "secrets"`)
}

// SpeakerWritesOnlyItsOwnLease: RBAC lets a speaker write Leases in its namespace (it renews
// its own, speaker-NODE); the policy keeps each speaker to its own node's, on create, update,
// patch and delete: not another node's, not the controller's leader Lease. A token bound to
// no pod (no node name) writes none.
func SpeakerWritesOnlyItsOwnLease(t *testing.T, in Install) {
	ctx := context.Background()
	const node, other = "lease-node-a", "lease-node-b"
	speaker := in.PodClient(t, speakerSA, "speaker-leases", node)
	lease := func(name, holder string) *coordinationv1.Lease { return heldLease(in.Namespace, name, holder) }
	own, theirs := "speaker-"+node, "speaker-"+other
	poll(t, "the policy refuses "+node+" creating Lease "+theirs, func(ctx context.Context) bool {
		return apierrors.IsForbidden(speaker.Create(ctx, lease(theirs, other), client.DryRunAll))
	})
	// The others' Leases exist, as in a running cluster (an admin writes them here).
	for name, holder := range map[string]string{theirs: other, leaderLease: "portico-controller-x_1"} {
		switch err := in.Client.Create(ctx, lease(name, holder)); {
		case err == nil:
			t.Cleanup(func() { _ = in.Client.Delete(context.Background(), lease(name, "")) })
		case !apierrors.IsAlreadyExists(err):
			t.Fatal(err)
		}
	}
	wantRefused(t, node+" creating Lease speaker-lease-node-c", speaker.Create(ctx, lease("speaker-lease-node-c", "lease-node-c")),
		notOwnLease(node, "speaker-lease-node-c"))
	wantAllowed(t, node+" creating its own Lease", speaker.Create(ctx, lease(own, node)))

	for _, name := range []string{theirs, leaderLease} {
		var cur coordinationv1.Lease
		must(t, in.Client.Get(ctx, types.NamespacedName{Namespace: in.Namespace, Name: name}, &cur))
		cur.Spec.HolderIdentity = ptr.To(node)
		wantRefused(t, node+" updating Lease "+name, speaker.Update(ctx, cur.DeepCopy()), notOwnLease(node, name))
		wantRefused(t, node+" deleting Lease "+name, speaker.Delete(ctx, lease(name, "")), notOwnLease(node, name))
		unchanged(t, in, &cur)
	}
	var mine coordinationv1.Lease
	must(t, speaker.Get(ctx, types.NamespacedName{Namespace: in.Namespace, Name: own}, &mine))
	mine.Spec.LeaseDurationSeconds = ptr.To[int32](16)
	wantAllowed(t, node+" updating its own Lease", speaker.Update(ctx, &mine))
	speakerPatchesOnlyItsOwnLease(t, in, speaker, node, theirs, leaderLease)

	unbound := in.clientFor(t, in.UnboundConfig(t, speakerSA))
	const noNode = "portico-speaker's request carries no node name"
	wantRefused(t, "a token bound to no pod creating Lease "+own, unbound.Create(ctx, lease(own, node), client.DryRunAll), noNode)
	wantRefused(t, "a token bound to no pod deleting Lease "+own, unbound.Delete(ctx, lease(own, ""), client.DryRunAll), noNode)

	wantAllowed(t, node+" deleting its own Lease", speaker.Delete(ctx, lease(own, "")))
}

// speakerPatchesOnlyItsOwnLease: a speaker never patches a Lease (it updates its own), so RBAC
// refuses every patch. The policy covers patches too, should a user grant them: with patch
// granted, the speaker on node patches only its own Lease, none of others.
func speakerPatchesOnlyItsOwnLease(t *testing.T, in Install, speaker client.Client, node string, others ...string) {
	ctx := context.Background()
	own := heldLease(in.Namespace, "speaker-"+node, "")
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"leaseDurationSeconds":17}}`))
	wantRefused(t, node+" patching its own Lease", speaker.Patch(ctx, own.DeepCopy(), patch), `cannot patch resource "leases"`)
	grantLeasePatch(t, in)
	poll(t, "the grant of patch takes effect", func(ctx context.Context) bool {
		return speaker.Patch(ctx, own.DeepCopy(), patch, client.DryRunAll) == nil
	})
	for _, name := range others {
		var cur coordinationv1.Lease
		must(t, in.Client.Get(ctx, types.NamespacedName{Namespace: in.Namespace, Name: name}, &cur))
		wantRefused(t, node+" patching Lease "+name, speaker.Patch(ctx, heldLease(in.Namespace, name, ""), patch), notOwnLease(node, name))
		unchanged(t, in, &cur)
	}
	wantAllowed(t, node+" patching its own Lease", speaker.Patch(ctx, own.DeepCopy(), patch))
}

// notOwnLease is the policy's refusal of a speaker on node writing Lease name.
func notOwnLease(node, name string) string {
	return "portico-speaker on node " + node + " may write only Lease speaker-" + node + ", not Lease " + name
}

// heldLease is a Lease held by holder for 15 s.
func heldLease(namespace, name, holder string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15)}}
}

// unchanged fails when the Lease was written since cur was read.
func unchanged(t *testing.T, in Install, cur *coordinationv1.Lease) {
	t.Helper()
	var now coordinationv1.Lease
	must(t, in.Client.Get(context.Background(), client.ObjectKeyFromObject(cur), &now))
	if now.ResourceVersion != cur.ResourceVersion {
		t.Errorf("Lease %s changed under refused writes: holder %s", cur.Name, ptr.Deref(now.Spec.HolderIdentity, ""))
	}
}

// grantLeasePatch lets portico-speaker patch Leases in its namespace until the test ends.
func grantLeasePatch(t *testing.T, in Install) {
	t.Helper()
	ctx := context.Background()
	meta := metav1.ObjectMeta{Name: "policycheck-lease-patch", Namespace: in.Namespace}
	role := &rbacv1.Role{ObjectMeta: meta, Rules: []rbacv1.PolicyRule{{APIGroups: []string{coordinationv1.GroupName},
		Resources: []string{"leases"}, Verbs: []string{"patch"}}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: meta, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: meta.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: in.Namespace, Name: speakerSA}}}
	must(t, in.Client.Create(ctx, role))
	must(t, in.Client.Create(ctx, binding))
	t.Cleanup(func() {
		_ = in.Client.Delete(context.Background(), binding)
		_ = in.Client.Delete(context.Background(), role)
	})
}
