package chart_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/portico-lb/portico/internal/controlplane"
	"github.com/portico-lb/portico/speaker/gossipkey"
	"github.com/portico-lb/portico/speaker/kubeapi"
)

// TestTemplateTwiceKeepsOneKey is `helm template | kubectl apply -f -` run twice with the real
// helm and kubectl binaries, as Argo CD or Flux sync, against a real apiserver authorizing with
// RBAC: between the two, a speaker (as its
// ServiceAccount, on its node) starts and reads, or makes, the gossip key from the Secret its
// DaemonSet names. The second render must be the first byte for byte, its apply must leave the
// key as it was, and a speaker on another node must read that same key.
func TestTemplateTwiceKeepsOneKey(t *testing.T) {
	controlplane.QuietLogs()
	helm := buildHelm(t)
	cp := controlplane.StartFor(t, controlplane.Options{APIServerArgs: map[string]string{"authorization-mode": "RBAC"}})
	ctx := context.Background()
	kubectl(t, cp, "", "create", "namespace", namespace)

	first := helmTemplate(t, helm)
	kubectl(t, cp, first, "apply", "-f", "-")
	ref, create := speakerKeySource(t, first)
	if !create {
		t.Errorf("the speakers do not create a missing key (no --memberlist-create-secret=true)")
	}
	keyA := startSpeaker(t, cp, "node-a", ref)

	second := helmTemplate(t, helm)
	kubectl(t, cp, second, "apply", "-f", "-")
	var sec corev1.Secret
	admin := client(t, cp.Config)
	if err := admin.Get(ctx, ref, &sec); err != nil {
		t.Fatal(err)
	}
	if got := sec.Data[gossipkey.PrimaryField]; !bytes.Equal(got, keyA) {
		t.Errorf("the second apply changed the gossip key in %s: the speakers that started before it now disagree with the ones after", ref)
	}
	if ref2, _ := speakerKeySource(t, second); ref2 != ref {
		t.Errorf("the speakers' key source moved from %s to %s", ref, ref2)
	}
	if keyB := startSpeaker(t, cp, "node-b", ref); !bytes.Equal(keyB, keyA) {
		t.Errorf("a speaker starting after the second apply got another key than the first speaker")
	}
	if first != second {
		t.Errorf("two renders of the same chart and values differ")
	}
}

// buildHelm builds the helm command from this module's Helm, as the cluster tests do.
func buildHelm(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "helm")
	if out, err := exec.Command("go", "build", "-o", bin, "helm.sh/helm/v3/cmd/helm").CombinedOutput(); err != nil {
		t.Fatalf("building helm: %v\n%s", err, out)
	}
	return bin
}

// helmTemplate is `helm template portico charts/portico -n portico-system` with args: no
// cluster to look anything up in, no CRDs (the control plane has them).
func helmTemplate(t *testing.T, helm string, args ...string) string {
	t.Helper()
	cmd := exec.Command(helm, append([]string{"template", "portico", chartDir, "-n", namespace}, args...)...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	return string(out)
}

// speakerKeySource reads, from a render's DaemonSet, which Secret the speakers take their key
// from and whether they create it when missing.
func speakerKeySource(t *testing.T, stream string) (types.NamespacedName, bool) {
	t.Helper()
	args := container(t, parse(t, "render", []byte(stream))["DaemonSet/"+namespace+"/portico-speaker"])["args"].([]any)
	var ref types.NamespacedName
	for _, a := range args {
		if v, ok := strings.CutPrefix(a.(string), "--memberlist-secret=$(POD_NAMESPACE)/"); ok {
			ref = types.NamespacedName{Namespace: namespace, Name: v}
		}
	}
	if ref.Name == "" {
		t.Fatalf("the speaker's args %v name no memberlist Secret", args)
	}
	return ref, slices.Contains(args, any("--memberlist-create-secret=true"))
}

// startSpeaker does what a speaker does at start for its key, as portico-speaker's
// ServiceAccount with a token bound to a pod on node, and returns the key.
func startSpeaker(t *testing.T, cp *controlplane.ControlPlane, node string, ref types.NamespacedName) []byte {
	t.Helper()
	cfg := rest.CopyConfig(cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + namespace + ":portico-speaker",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
		Extra:  map[string][]string{"authentication.kubernetes.io/node-name": {node}}}
	sec, _, err := gossipkey.Ensure(context.Background(), client(t, cfg), ref)
	if err != nil {
		t.Fatalf("speaker on %s: %v", node, err)
	}
	return sec.Data[gossipkey.PrimaryField]
}

func client(t *testing.T, cfg *rest.Config) *kubeapi.Client {
	t.Helper()
	c, err := kubeapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// kubectl runs kubectl against the control plane with stdin as its input.
func kubectl(t *testing.T, cp *controlplane.ControlPlane, stdin string, args ...string) {
	t.Helper()
	cmd := cp.KubectlCommand(context.Background(), args...)
	cmd.Stdin = strings.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}
