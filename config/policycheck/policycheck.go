// Package policycheck checks, against a real kube-apiserver, what Portico's RBAC and admission
// policies let its ServiceAccounts do. Every request is made with a token the apiserver issues
// for a pod on a node (a TokenRequest bound to the pod, as the kubelet asks for it), so the
// apiserver itself puts the pod and its node in the request's user extra info, as it does for
// a running speaker or controller. The same checks run on the shipped manifests (config) and on
// the chart's rendering (hack/chart).
package policycheck

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The user extra info the apiserver fills in from a pod-bound token.
const (
	podNameExtra  = "authentication.kubernetes.io/pod-name"
	nodeNameExtra = "authentication.kubernetes.io/node-name"
)

// Install is Portico as applied to a control plane: the admin's connection and the namespace
// the manifests or the chart put Portico in.
type Install struct {
	Config    *rest.Config
	Client    client.Client
	Namespace string
}

// PodConfig creates a pod of ServiceAccount sa on node (the Node too, when missing) and returns
// a connection with a token bound to that pod, checked to carry the pod and node names.
func (in Install) PodConfig(t *testing.T, sa, pod, node string) *rest.Config {
	t.Helper()
	ctx := context.Background()
	if err := in.Client.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: in.Namespace}, Spec: corev1.PodSpec{
		NodeName: node, ServiceAccountName: sa, Containers: []corev1.Container{{Name: "c", Image: "portico"}}}}
	must(t, in.Client.Create(ctx, p))
	// No kubelet ends it: deleted at once, so a next run may make it again.
	t.Cleanup(func() { _ = in.Client.Delete(context.Background(), p, client.GracePeriodSeconds(0)) })
	return in.tokenConfig(t, sa, &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID},
		map[string]string{podNameExtra: pod, nodeNameExtra: node})
}

// UnboundConfig is a connection as sa with a token bound to no pod (as a long-lived or
// hand-made token is): the apiserver names no pod or node in its requests.
func (in Install) UnboundConfig(t *testing.T, sa string) *rest.Config {
	t.Helper()
	return in.tokenConfig(t, sa, nil, map[string]string{podNameExtra: "", nodeNameExtra: ""})
}

// tokenConfig asks the apiserver for a token of sa (bound to bound, if any) and checks, with a
// SelfSubjectReview, that it authenticates as sa with the extra values want ("" for none).
func (in Install) tokenConfig(t *testing.T, sa string, bound *authenticationv1.BoundObjectReference, want map[string]string) *rest.Config {
	t.Helper()
	ctx := context.Background()
	account := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: in.Namespace}}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: bound}}
	must(t, in.Client.SubResource("token").Create(ctx, account, tr))
	cfg := rest.AnonymousClientConfig(in.Config)
	cfg.BearerToken = tr.Status.Token
	c := in.clientFor(t, cfg)
	review := &authenticationv1.SelfSubjectReview{}
	must(t, c.Create(ctx, review))
	u := review.Status.UserInfo
	if user := "system:serviceaccount:" + in.Namespace + ":" + sa; u.Username != user {
		t.Fatalf("the token authenticates as %s, want %s", u.Username, user)
	}
	for key, value := range want {
		var wantValues []string
		if value != "" {
			wantValues = []string{value}
		}
		if got := u.Extra[key]; !slices.Equal(got, wantValues) {
			t.Fatalf("the token of %s carries %s=%v, want %v", sa, key, got, wantValues)
		}
	}
	return cfg
}

// PodClient is PodConfig's connection as a client.
func (in Install) PodClient(t *testing.T, sa, pod, node string) client.Client {
	t.Helper()
	return in.clientFor(t, in.PodConfig(t, sa, pod, node))
}

func (in Install) clientFor(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: in.Client.Scheme()})
	must(t, err)
	return c
}

// wantRefused fails unless err is a refusal (403) whose message contains message.
func wantRefused(t *testing.T, what string, err error, message string) {
	t.Helper()
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), message) {
		t.Errorf("%s: got %v, want Forbidden with %q", what, err, message)
	}
}

// wantAllowed fails on any error.
func wantAllowed(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v", what, err)
	}
}

// poll waits up to a minute for cond.
func poll(t *testing.T, what string, cond func(context.Context) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Minute, true,
		func(ctx context.Context) (bool, error) { return cond(ctx), nil })
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
