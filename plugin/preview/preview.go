// Package preview is `kubectl portico plan -f pools.yaml`: what applying a pool change would do
// to the Services that hold addresses and to those waiting for one, computed with the
// controller's own allocator, changing nothing.
package preview

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller"
	"github.com/portico-lb/portico/controller/allocator"
	"github.com/portico-lb/portico/plugin"
)

// Command is the plan subcommand.
func Command(env func(*cobra.Command) (*plugin.Env, error)) *cobra.Command {
	var file, class string
	var prune bool
	cmd := &cobra.Command{
		Use:   "plan -f pools.yaml",
		Short: "Show what a pool change would do to assigned and waiting Services, changing nothing",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pools, err := readPools(file, cmd.InOrStdin())
			if err != nil {
				return err
			}
			e, err := env(cmd)
			if err != nil {
				return err
			}
			return Run(cmd.Context(), e, pools, class, prune)
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "IPAddressPool manifests to plan (- for stdin)")
	cmd.Flags().BoolVar(&prune, "prune", false, "treat pools missing from the file as deleted")
	cmd.Flags().StringVar(&class, "load-balancer-class", porticov1.DefaultLoadBalancerClass, "the controller's --load-balancer-class")
	_ = cmd.MarkFlagRequired("filename")
	return cmd
}

// readPools decodes the IPAddressPools of a (multi-document) YAML or JSON file; other kinds
// are an error, so a wrong file is not mistaken for "no change".
func readPools(file string, stdin io.Reader) ([]porticov1.IPAddressPool, error) {
	in := stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		in = f
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(in, 4096)
	var pools []porticov1.IPAddressPool
	for i := 1; ; i++ {
		var p porticov1.IPAddressPool
		err := dec.Decode(&p)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i, err)
		}
		if p.Kind == "" && p.Name == "" {
			continue // an empty document
		}
		if p.Kind != "IPAddressPool" || !strings.HasPrefix(p.APIVersion, porticov1.GroupVersion.Group+"/") {
			return nil, fmt.Errorf("%s: document %d is a %s %s, not a %s IPAddressPool", file, i, p.APIVersion, p.Kind, porticov1.GroupVersion.Group)
		}
		pools = append(pools, p)
	}
	if len(pools) == 0 {
		return nil, fmt.Errorf("%s: no IPAddressPool in it", file)
	}
	return pools, nil
}

// Run prints the preview.
func Run(ctx context.Context, e *plugin.Env, pools []porticov1.IPAddressPool, class string, prune bool) error {
	p, err := controller.PreviewPools(ctx, e.Client, class, pools, prune)
	if err != nil {
		return err
	}
	fmt.Fprintln(e.Out, "POOLS")
	tw := plugin.Table(e.Out, "NAME", "CHANGE", "ASSIGNED", "AVAILABLE")
	for _, pp := range p.Pools {
		plugin.Row(tw, pp.Name, pp.Change, pp.Assigned, pp.Available)
	}
	tw.Flush()
	fmt.Fprintln(e.Out, "\nSERVICES")
	tw = plugin.Table(e.Out, "SERVICE", "NOW", "AFTER", "EFFECT")
	counts := map[string]int{}
	for _, sp := range p.Services {
		effect := sp.Effect
		switch sp.Effect {
		case "orphaned":
			effect += " (keeps its address, outside every pool)"
		case "waits":
			effect += ": " + sp.Why
		}
		counts[sp.Effect]++
		plugin.Row(tw, sp.Service, show(sp.Before), show(sp.After), effect)
	}
	tw.Flush()
	fmt.Fprintf(e.Out, "\n%d keep their address, %d change pool, %d orphaned, %d would get one, %d keep waiting. Nothing was changed.\n",
		counts["keeps"], counts["changes pool"], counts["orphaned"], counts["gets"], counts["waits"])
	return nil
}

func show(a allocator.Assignment) string {
	if len(a.IPs) == 0 {
		return "<pending>"
	}
	s := make([]string, len(a.IPs))
	for i, ip := range a.IPs {
		s[i] = ip.String()
	}
	pool := a.Pool()
	if pool == "" {
		pool = "no pool"
	}
	return strings.Join(s, ",") + " (" + pool + ")"
}
