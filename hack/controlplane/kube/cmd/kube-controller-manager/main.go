// Command kube-controller-manager is the upstream kube-controller-manager, built from source for
// Portico's data-plane tests, where its endpointslice controller turns Ready Pods into the
// EndpointSlices that kube-proxy and the speakers read.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
