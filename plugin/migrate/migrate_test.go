package migrate_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/portico-lb/portico/internal/controlplane"
	"github.com/portico-lb/portico/plugin/migrate"
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) { controlplane.Main(m, &cp) }

// run runs `kubectl portico migrate` with args; connect is the cluster when no -f is given.
func run(t *testing.T, connect client.Client, args ...string) (stdout, stderr string) {
	t.Helper()
	// As cmd/kubectl-portico mounts it: under a root that owns -n.
	cmd := &cobra.Command{Use: "kubectl-portico", SilenceUsage: true}
	cmd.PersistentFlags().StringP("namespace", "n", "", "")
	cmd.AddCommand(migrate.Command(func(*cobra.Command) (client.Client, error) { return connect, nil }))
	args = append([]string{"migrate"}, args...)
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("migrate %v: %v\n%s", args, err, errOut.String())
	}
	return out.String(), errOut.String()
}

// TestTranscripts pins the translation of realistic MetalLB configurations (testdata/metallb)
// in testdata/migrate.txt; -rewrite updates it.
//
//	migrate file=<testdata/metallb file>...   → the YAML printed
func TestTranscripts(t *testing.T) {
	datadriven.RunTest(t, "testdata/migrate.txt", func(t *testing.T, d *datadriven.TestData) string {
		var args []string
		for _, a := range d.CmdArgs {
			for _, v := range a.Vals {
				args = append(args, "-f", filepath.Join("testdata", "metallb", v))
			}
		}
		out, _ := run(t, nil, args...)
		return out
	})
}

// TestOutputApplies: what migrate prints for every realistic configuration is accepted by the
// real apiserver with Portico's CRDs (server-side apply with the real kubectl), and every
// translated object is there afterwards.
func TestOutputApplies(t *testing.T) {
	for _, f := range []string{"home-lab.yaml", "datacenter.yaml", "legacy.yaml", "untranslatable.yaml"} {
		t.Run(f, func(t *testing.T) {
			out, _ := run(t, nil, "-f", filepath.Join("testdata", "metallb", f))
			cmd := cp.KubectlCommand(context.Background(), "apply", "--server-side", "--field-manager", "migrate-test", "-f", "-")
			cmd.Stdin = strings.NewReader(out)
			applied, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("kubectl apply --server-side of migrate's output: %v\n%s\n--- output was:\n%s", err, applied, out)
			}
			if got, want := strings.Count(string(applied), "serverside-applied"), strings.Count(out, "\nkind: "); got != want || got == 0 {
				t.Errorf("%d objects applied, migrate printed %d:\n%s", got, want, applied)
			}
		})
	}
}

// TestNothingSilentlyDropped: every MetalLB spec field in the inputs is in the Portico object
// of the same name, or listed as not translated (the field or its whole object).
func TestNothingSilentlyDropped(t *testing.T) {
	for _, f := range []string{"datacenter.yaml", "legacy.yaml", "untranslatable.yaml"} {
		path := filepath.Join("testdata", "metallb", f)
		objs, err := migrate.ReadFiles([]string{path}, nil)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := run(t, nil, "-f", path)
		translated, err := migrate.ReadFiles([]string{"-"}, strings.NewReader(out))
		if err != nil {
			t.Fatal(err)
		}
		specOf := map[string]map[string]any{}
		for _, o := range translated {
			specOf[o.GetKind()+"/"+o.GetName()], _ = o.Object["spec"].(map[string]any)
		}
		for _, o := range objs {
			if o.GetKind() == "Community" {
				continue // inlined into BGPAdvertisements
			}
			desc := o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName() + " (" + o.GetAPIVersion() + ")"
			if strings.Contains(out, "#   - "+desc+": ") {
				continue // the whole object is listed
			}
			spec, _ := o.Object["spec"].(map[string]any)
			for field, v := range spec {
				_, inObject := specOf[o.GetKind()+"/"+o.GetName()][field]
				listed := strings.Contains(out, "#   - "+desc+" spec."+field)
				if !inObject && !listed && v != false {
					t.Errorf("%s: spec.%s neither translated nor listed", desc, field)
				}
			}
		}
		if strings.Contains(out, "s3cret") {
			t.Error("a clear-text BGP password was printed")
		}
	}
}

// TestFromCluster: with no -f, migrate reads MetalLB's objects from the cluster (MetalLB's CRDs,
// v1beta2 BGPPeers served) and prints the same as from the files they were created from.
func TestFromCluster(t *testing.T) {
	ctx := context.Background()
	kubectl := func(args ...string) {
		t.Helper()
		out, err := cp.KubectlCommand(context.Background(), args...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
	}
	kubectl("apply", "-f", "testdata/metallb-crds.yaml")
	kubectl("wait", "--for=condition=Established", "-f", "testdata/metallb-crds.yaml")
	if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "metallb-system"}}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"home-lab.yaml", "datacenter.yaml"} {
		kubectl("apply", "-f", filepath.Join("testdata", "metallb", f))
	}
	// A fresh client: the CRDs are new since cp.Client learned the API.
	c, err := client.New(cp.Config, client.Options{Scheme: cp.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	fromCluster, _ := run(t, c, "-n", "metallb-system")
	fromFiles, _ := run(t, nil, "-f", "testdata/metallb/home-lab.yaml", "-f", "testdata/metallb/datacenter.yaml")
	if fromCluster != fromFiles {
		t.Errorf("from the cluster:\n%s\nfrom the files:\n%s", fromCluster, fromFiles)
	}
	if !strings.Contains(fromCluster, "kind: BGPPeer") {
		t.Errorf("no BGPPeer read from the cluster:\n%s", fromCluster)
	}
}

// TestStderrListsWhatIsLeft: the list also goes to stderr, so `migrate | kubectl apply -f -`
// still shows it to the person running it.
func TestStderrListsWhatIsLeft(t *testing.T) {
	out, errOut := run(t, nil, "-f", "testdata/metallb/untranslatable.yaml")
	if n := strings.Count(errOut, "not translated: "); n == 0 || n != strings.Count(out, "\n#   - ") {
		t.Errorf("stderr lists %d items, the output %d:\n%s", n, strings.Count(out, "\n#   - "), errOut)
	}
}

// TestBadInput: unreadable input is an error naming the file and the document, not an empty
// translation.
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"broken.yaml":  "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\n---\nspec: [unclosed\n",
		"nokind.yaml":  "apiVersion: metallb.io/v1beta1\nmetadata: {name: x}\n",
		"missing.yaml": "",
	} {
		path := filepath.Join(dir, name)
		if name != "missing.yaml" {
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		_, err := migrate.ReadFiles([]string{path}, nil)
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: got %v, want an error naming the file", name, err)
		}
	}
}
