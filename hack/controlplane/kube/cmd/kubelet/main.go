// Command kubelet is the upstream kubelet, built from source for `make cluster`: each node of
// that cluster runs one in its network namespace, in front of its own containerd.
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	os.Exit(cli.Run(app.NewKubeletCommand(context.Background())))
}
