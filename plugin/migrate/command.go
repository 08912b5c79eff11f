package migrate

import (
	"fmt"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Command is `kubectl portico migrate`. connect reaches the cluster (only called when no -f
// is given); the namespace to read comes from the root's -n flag when set.
func Command(connect func(*cobra.Command) (client.Client, error)) *cobra.Command {
	var files []string
	var opts Options
	cmd := &cobra.Command{
		Use:   "migrate [-f metallb.yaml]...",
		Short: "Print the Portico objects equivalent to MetalLB's configuration, and list what cannot be translated",
		Long: `migrate reads MetalLB's IPAddressPools, L2Advertisements, BGPAdvertisements, BGPPeers
(v1beta1 and v1beta2) and Communities, from files (-f, several documents per file, - for stdin)
or from the cluster (every namespace, or -n), and prints the equivalent Portico objects as YAML
for kubectl apply. Whatever cannot be translated is listed first, as comments, and on stderr.
Services need no change: Portico honours MetalLB's annotations.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			objs, err := ReadFiles(files, cmd.InOrStdin())
			if err != nil {
				return err
			}
			if len(files) == 0 {
				c, err := connect(cmd)
				if err != nil {
					return err
				}
				ns := ""
				if f := cmd.Flag("namespace"); f != nil && f.Changed {
					ns = f.Value.String()
				}
				if objs, err = ReadCluster(cmd.Context(), c, ns); err != nil {
					return err
				}
			}
			r := Translate(objs, opts)
			for _, p := range r.NotTranslated {
				fmt.Fprintln(cmd.ErrOrStderr(), "not translated:", p)
			}
			for _, p := range r.Notes {
				fmt.Fprintln(cmd.ErrOrStderr(), "to check or do by hand:", p)
			}
			return Write(cmd.OutOrStdout(), r)
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "MetalLB manifests to translate (repeatable; - for stdin); default: read them from the cluster")
	cmd.Flags().StringVar(&opts.Namespace, "portico-namespace", "portico-system", "the namespace Portico runs in, where BGP password Secrets must be")
	return cmd
}
