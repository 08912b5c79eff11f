// Command kube-proxy is the upstream kube-proxy, built from source for Portico's data-plane
// tests: it programs the nftables rules that carry traffic for an EXTERNAL-IP to the pods.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-proxy/app"
)

func main() {
	os.Exit(cli.Run(app.NewProxyCommand()))
}
