// Command pause is the pod sandbox image of `make cluster`'s nodes: it holds a pod's
// namespaces and waits for SIGTERM or SIGINT, as the upstream pause container does.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
