// Command kubectl-portico is Portico's kubectl plugin: `kubectl portico status|explain|plan|routes|migrate`.
// Each subcommand lives in its own package under plugin/; this main only dispatches.
package main

import (
	"os"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/portico-lb/portico/plugin"
	"github.com/portico-lb/portico/plugin/explain"
	"github.com/portico-lb/portico/plugin/migrate"
	"github.com/portico-lb/portico/plugin/preview"
	"github.com/portico-lb/portico/plugin/routes"
	"github.com/portico-lb/portico/plugin/status"
)

func main() {
	if err := newRoot().Execute(); err != nil {
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	var flags plugin.Flags
	root := &cobra.Command{
		Use:          "kubectl-portico",
		Short:        "Portico: what your LoadBalancer Services get, and why they work or not",
		SilenceUsage: true,
	}
	flags.Register(root)
	env := func(cmd *cobra.Command) (*plugin.Env, error) { return flags.Env(cmd.OutOrStdout()) }
	connect := func(cmd *cobra.Command) (client.Client, error) {
		e, err := env(cmd)
		if err != nil {
			return nil, err
		}
		return e.Client, nil
	}
	root.AddCommand(status.Command(env), explain.Command(env), preview.Command(env), routes.Command(env), migrate.Command(connect))
	return root
}
