package controlplane

import (
	"context"

	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// TB is what StartFor and RunManager need of a test (a *testing.T or *testing.B).
type TB interface {
	Helper()
	Cleanup(func())
	Fatal(args ...any)
	Errorf(format string, args ...any)
}

// StartFor starts a control plane that stops when the test ends; one that cannot start fails
// the test.
func StartFor(tb TB, opts Options) *ControlPlane {
	tb.Helper()
	cp, err := Start(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			tb.Errorf("stopping the control plane: %v", err)
		}
	})
	return cp
}

// RunManager runs a controller-runtime manager against the control plane, set up by setup
// (e.g. controller.Setup), until the test ends; a manager that fails fails the test. Several
// may run in one process, one after another (controller names are not checked for clashes).
// opts may change the manager's options (a test that holds some writes wraps its client).
func (cp *ControlPlane) RunManager(tb TB, setup func(ctrl.Manager) error, opts ...func(*ctrl.Options)) {
	tb.Helper()
	o := ctrl.Options{
		Scheme:     cp.Scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	}
	for _, opt := range opts {
		opt(&o)
	}
	mgr, err := ctrl.NewManager(cp.Config, o)
	if err != nil {
		tb.Fatal(err)
	}
	if err := setup(mgr); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("manager: %v", err)
		}
	})
}
