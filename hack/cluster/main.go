// Command cluster is `make cluster`: a real Kubernetes cluster on this machine (as root), with
// Portico's image, a pause and an echo image built here and imported into every node, and
// Portico's manifests rendered for that image (docs/cluster.md). It prints a kubeconfig and
// runs until Ctrl-C, then removes everything it made.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/portico-lb/portico/internal/cluster"
	"github.com/portico-lb/portico/internal/controlplane"
)

func main() {
	out := flag.String("out", "bin/cluster", "directory for the images and the rendered manifests")
	image := flag.String("image", "portico.local/portico:dev", "the reference Portico's image is built and imported under")
	flag.Parse()
	controlplane.QuietLogs()
	if err := run(*out, *image); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func run(out, image string) error {
	root, err := controlplane.ModuleRoot()
	if err != nil {
		return err
	}
	assets, err := controlplane.AssetsDir(root)
	if err != nil {
		return err
	}
	if why := cluster.Usable(assets); why != "" {
		return fmt.Errorf("cannot run here: %s", why)
	}
	if out, err = filepath.Abs(out); err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	start := time.Now()
	built, err := cluster.BuildImages(ctx, root, filepath.Join(assets, "kubectl"), out, image)
	if err != nil {
		return err
	}
	fmt.Printf("cluster: images and manifests built in %s\n", time.Since(start).Round(time.Second))
	dir, err := os.MkdirTemp("", "portico-cluster-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	c, err := cluster.Start(ctx, cluster.Options{Dir: dir, Images: built.Archives, Progress: os.Stdout})
	if err != nil {
		return err
	}
	defer c.Stop()
	// The Prometheus operator's CRDs, so that Portico installs here with its monitoring objects
	// as on a cluster running kube-prometheus-stack (docs/monitoring.md).
	if err := c.CP.InstallPromOperatorCRDs(ctx); err != nil {
		return err
	}
	fmt.Printf("\ncluster: ready in %s; logs in %s\n  export KUBECONFIG=%s\n  kubectl get nodes -o wide\n"+
		"  kubectl apply --server-side -f %s   # Portico, running %s\n"+
		"The Prometheus operator's CRDs are installed: the chart's monitoring.enabled=true adds Portico's ServiceMonitors, alerts and dashboard.\n"+
		"A machine on the LAN: ip netns exec %s curl http://<EXTERNAL-IP>/\nPress Ctrl-C to stop and clean up.\n",
		time.Since(start).Round(time.Second), c.Logs, c.Kubeconfig, built.Manifests, image, c.Client.NS)
	<-ctx.Done()
	fmt.Println("cluster: stopping")
	return nil
}
