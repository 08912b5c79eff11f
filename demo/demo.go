// Package demo runs Portico's home-lab picture locally: a real kube-apiserver and etcd, the
// CRDs, the home-lab pool 10.0.0.200-10.0.0.215 and its L2Advertisement, the controller, and
// Services gitea, argocd, harbor and grafana getting .200 to .203; as root, the data plane too
// (dataplane.go): speakers, kube-proxy and the apps' pods in network namespaces, and a client
// fetching each address.
package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/controller"
	"github.com/portico-lb/portico/internal/controlplane"
	"github.com/portico-lb/portico/plugin"
	"github.com/portico-lb/portico/plugin/status"
)

// Options of a demo run.
type Options struct {
	// Out receives what a person reads.
	Out io.Writer
	// Once returns after printing, instead of waiting for ctx to end.
	Once bool
}

// Run sets the demo up, prints it, waits for ctx to end (unless Once) and tears it down.
func Run(ctx context.Context, opts Options) (err error) {
	out := opts.Out
	root, err := controlplane.ModuleRoot()
	if err != nil {
		return err
	}
	logDir, err := os.MkdirTemp("", "portico-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(logDir)

	fmt.Fprintln(out, "==> starting kube-apiserver and etcd (built from source by `make controlplane`)")
	cp, err := controlplane.Start(controlplane.Options{})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(out, "==> stopping the control plane")
		if stopErr := cp.Stop(); err == nil {
			err = stopErr
		}
	}()

	logFile, err := os.Create(filepath.Join(logDir, "portico-controller.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	stopController, err := startController(cp, zap.New(zap.WriteTo(logFile)))
	if err != nil {
		return err
	}
	defer stopController()

	kubectl := func(args ...string) error {
		fmt.Fprintf(out, "\n$ kubectl %s\n", strings.Join(args, " "))
		cmd := cp.KubectlCommand(ctx, args...)
		cmd.Stdout, cmd.Stderr, cmd.Dir = out, out, root
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("kubectl %s: %w", strings.Join(args, " "), err)
		}
		return nil
	}
	if err := kubectl("apply", "-f", "config/samples/ipaddresspool-home-lab.yaml", "-f", "config/samples/l2advertisement-home-lab.yaml"); err != nil {
		return err
	}
	if err := waitPool(ctx, cp.Client, "home-lab", func(p *porticov1.IPAddressPool) bool {
		return meta.IsStatusConditionTrue(p.Status.Conditions, porticov1.ConditionReady)
	}); err != nil {
		return err
	}
	fmt.Fprintf(out, "\n$ kubectl apply -f - <<EOF   # gitea, argocd, harbor, grafana\n")
	apply := cp.KubectlCommand(ctx, "apply", "-f", "-")
	apply.Stdin, apply.Stdout, apply.Stderr = strings.NewReader(homeLabServices), out, out
	if err := apply.Run(); err != nil {
		return fmt.Errorf("kubectl apply -f - (the four Services): %w", err)
	}
	if err := waitAddresses(ctx, cp.Client, "default", 4); err != nil {
		return err
	}
	if err := waitPool(ctx, cp.Client, "home-lab", func(p *porticov1.IPAddressPool) bool { return p.Status.Assigned == 4 }); err != nil {
		return err
	}
	for _, args := range [][]string{{"get", "svc"}, {"get", "ipaddresspools"}, {"get", "l2advertisements"}} {
		if err := kubectl(args...); err != nil {
			return err
		}
	}

	assets, err := controlplane.AssetsDir(root)
	if err != nil {
		return err
	}
	if why := DataPlaneUsable(assets); why != "" {
		fmt.Fprintf(out, "\n(no data plane: %s. As root, the demo also runs speakers and kube-proxy in network namespaces and curls each EXTERNAL-IP.)\n", why)
	} else {
		fmt.Fprintln(out, "\n==> data plane: three nodes in network namespaces, each running portico-speaker and kube-proxy (nftables), the four apps as pods, a client on the LAN")
		clientNS, stopDataPlane, err := startDataPlane(ctx, cp, root, assets, logDir)
		if err != nil {
			return fmt.Errorf("data plane: %w", err)
		}
		defer stopDataPlane()
		var svcs []corev1.Service
		for _, name := range []string{"gitea", "argocd", "harbor", "grafana"} {
			var s corev1.Service
			if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &s); err != nil {
				return err
			}
			svcs = append(svcs, s)
		}
		if err := curlEach(ctx, out, clientNS, svcs); err != nil {
			return err
		}
	}

	fmt.Fprintln(out, "\n$ kubectl portico status")
	if err := status.Run(ctx, &plugin.Env{Client: cp.Client, Namespace: "default", Out: out}); err != nil {
		return err
	}

	fmt.Fprintf(out, "\nThe control plane is yours to explore:\n  export KUBECONFIG=%s\n  %s get portico\n  go run ./cmd/kubectl-portico explain svc/gitea    # or: go install ./cmd/kubectl-portico; kubectl portico ...\n", cp.Kubeconfig, cp.Kubectl)
	if opts.Once {
		return nil
	}
	fmt.Fprintf(out, "Controller log: %s\n", logFile.Name())
	fmt.Fprintln(out, "Press Ctrl-C to stop and clean up.")
	<-ctx.Done()
	return nil
}

// startController runs Portico's reconcilers in this process, as portico-controller would.
func startController(cp *controlplane.ControlPlane, log logr.Logger) (stop func(), err error) {
	mgr, err := ctrl.NewManager(cp.Config, ctrl.Options{
		Scheme:  cp.Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Logger:  log,
	})
	if err != nil {
		return nil, err
	}
	if err := controller.Setup(mgr, controller.Options{}); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			log.Error(err, "controller stopped")
		}
	}()
	return func() { cancel(); <-done }, nil
}

// homeLabServices are the README's four Services, created in this order.
const homeLabServices = `
apiVersion: v1
kind: Service
metadata: {name: gitea}
spec: {type: LoadBalancer, selector: {app: gitea}, ports: [{name: http, port: 80, targetPort: 3000}]}
---
apiVersion: v1
kind: Service
metadata: {name: argocd}
spec: {type: LoadBalancer, selector: {app: argocd}, ports: [{name: https, port: 443, targetPort: 8080}]}
---
apiVersion: v1
kind: Service
metadata: {name: harbor}
spec: {type: LoadBalancer, selector: {app: harbor}, ports: [{name: https, port: 443, targetPort: 8443}]}
---
apiVersion: v1
kind: Service
metadata: {name: grafana}
spec: {type: LoadBalancer, selector: {app: grafana}, ports: [{name: http, port: 80, targetPort: 3000}]}
`

// waitAddresses waits until n LoadBalancer Services of the namespace have an address.
func waitAddresses(ctx context.Context, c client.Client, ns string, n int) error {
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var svcs corev1.ServiceList
		if err := c.List(ctx, &svcs, client.InNamespace(ns)); err != nil {
			return false, err
		}
		got := 0
		for _, s := range svcs.Items {
			if len(s.Status.LoadBalancer.Ingress) > 0 {
				got++
			}
		}
		return got >= n, nil
	})
}

// waitPool waits until the pool's status satisfies ok.
func waitPool(ctx context.Context, c client.Client, name string, ok func(*porticov1.IPAddressPool) bool) error {
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var pool porticov1.IPAddressPool
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &pool); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return ok(&pool), nil
	})
}
