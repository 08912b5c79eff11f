// Package plugin holds what the kubectl-portico subcommands (plugin/status, plugin/explain,
// plugin/preview, ...) share: the connection to the cluster and the output.
package plugin

import (
	"io"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/portico-lb/portico/internal/kube"
)

// Env is what a subcommand runs with.
type Env struct {
	Client client.Client
	// Namespace from -n, or the kubeconfig context's, or "default".
	Namespace string
	Out       io.Writer
}

// Flags are the connection flags every subcommand accepts, as kubectl passes them on.
type Flags struct {
	Kubeconfig string
	Context    string
	Namespace  string
}

// Register adds the flags to a command (persistent: every subcommand has them).
func (f *Flags) Register(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&f.Kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default $KUBECONFIG or ~/.kube/config)")
	cmd.PersistentFlags().StringVar(&f.Context, "context", "", "kubeconfig context to use")
	cmd.PersistentFlags().StringVarP(&f.Namespace, "namespace", "n", "", "namespace (default: the context's; all namespaces for migrate)")
}

// Env connects to the cluster the flags name.
func (f *Flags) Env(out io.Writer) (*Env, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.Kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: f.Context})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, err
	}
	ns := f.Namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, err
		}
	}
	scheme, err := kube.NewScheme()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	return &Env{Client: c, Namespace: ns, Out: out}, nil
}
