// Command kube-scheduler is the upstream kube-scheduler, built from source for `make cluster`,
// where it places the pods of Deployments and DaemonSets on the cluster's nodes.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
