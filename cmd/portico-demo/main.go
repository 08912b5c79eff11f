// Command portico-demo runs the home-lab demo (`make demo`): a local control plane, the
// home-lab pool and the controller, until Ctrl-C. As root it also runs speakers and kube-proxy
// in network namespaces and fetches each EXTERNAL-IP from a client namespace.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/portico-lb/portico/demo"
)

func main() {
	once := flag.Bool("once", false, "print the demo and exit instead of waiting for Ctrl-C")
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := demo.Run(ctx, demo.Options{Out: os.Stdout, Once: *once}); err != nil {
		fmt.Fprintln(os.Stderr, "portico-demo:", err)
		os.Exit(1)
	}
}
