// Command cluster is `make cluster`: a real Kubernetes cluster on this machine (as root), with
// Portico's image, the lab's pause image and the echo image imported into every node
// (docs/cluster.md). It prints a kubeconfig and runs until Ctrl-C, then removes everything.
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
	images := flag.String("images", "bin/cluster/images", "directory of OCI archives (*.tar, any depth) to import into every node")
	flag.Parse()
	if err := run(*images); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func run(imageDir string) error {
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
	images, err := archives(imageDir)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "portico-cluster-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	start := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{Dir: dir, Images: images, Progress: os.Stdout})
	if err != nil {
		return err
	}
	defer c.Stop()
	fmt.Printf("\ncluster: ready in %s; logs in %s\n  export KUBECONFIG=%s\n  kubectl get nodes -o wide\n"+
		"A machine on the LAN: ip netns exec %s curl http://<EXTERNAL-IP>/\nPress Ctrl-C to stop and clean up.\n",
		time.Since(start).Round(time.Second), c.Logs, c.Kubeconfig, c.Client.NS)
	<-ctx.Done()
	fmt.Println("cluster: stopping")
	return nil
}

// archives lists the OCI archives under dir.
func archives(dir string) ([]string, error) {
	var found []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && filepath.Ext(p) == ".tar" {
			found = append(found, p)
		}
		return err
	})
	if err == nil && len(found) == 0 {
		err = fmt.Errorf("no images (*.tar) in %s: run `make cluster`, which builds them", dir)
	}
	return found, err
}
