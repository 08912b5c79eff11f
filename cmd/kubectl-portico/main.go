// Command kubectl-portico is Portico's kubectl plugin. Each subcommand lives in its own
// package under plugin/; this main only dispatches.
package main

import (
	"os"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/portico-lb/portico/internal/kube"
	"github.com/portico-lb/portico/plugin/migrate"
)

func main() {
	if err := newRoot().Execute(); err != nil {
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	var kubeconfig, context string
	root := &cobra.Command{Use: "kubectl-portico", Short: "Portico's kubectl plugin", SilenceUsage: true}
	root.PersistentFlags().StringVar(&kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default $KUBECONFIG or ~/.kube/config)")
	root.PersistentFlags().StringVar(&context, "context", "", "kubeconfig context to use")
	root.PersistentFlags().StringP("namespace", "n", "", "namespace (default: all for migrate)")
	connect := func(*cobra.Command) (client.Client, error) {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = kubeconfig
		cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
		if err != nil {
			return nil, err
		}
		scheme, err := kube.NewScheme()
		if err != nil {
			return nil, err
		}
		return client.New(cfg, client.Options{Scheme: scheme})
	}
	root.AddCommand(migrate.Command(connect))
	return root
}
