// Package controlplane starts a real kube-apiserver and etcd (built from source by
// `make controlplane`) through controller-runtime's envtest, installs Portico's CRDs and hands
// tests a client. Every integration test in the project uses it; none uses a fake client.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/portico-lb/portico/internal/kube"
)

// Version is the Kubernetes version `make controlplane` builds.
const Version = "1.37.2"

// ServiceCIDR replaces envtest's default 10.0.0.0/24, which collides with the home-lab pool.
const ServiceCIDR = "10.96.0.0/12"

// Binaries are the executables a control plane needs, in the assets directory.
var Binaries = []string{"kube-apiserver", "etcd", "kubectl"}

// ControlPlane is a running kube-apiserver and etcd with Portico's CRDs installed.
type ControlPlane struct {
	// Config reaches the apiserver as a cluster admin.
	Config *rest.Config
	// Client is a controller-runtime client whose scheme knows core and Portico types.
	Client client.Client
	// Scheme is Client's scheme.
	Scheme *runtime.Scheme
	// Kubeconfig is the path of an admin kubeconfig file, for kubectl.
	Kubeconfig string
	// Kubectl is the path of the kubectl binary built with the control plane.
	Kubectl string
	// CAFile is the PEM file of the CA that signed the apiserver's serving certificate, when
	// Options.ServingAddresses made one (kube-controller-manager's --root-ca-file).
	CAFile string
	// KubeletClientCAFile is the PEM file of the CA that signed the certificate the apiserver
	// presents to kubelets, when Options.KubeletClientCert made one: a kubelet that trusts it
	// (authentication.x509.clientCAFile) serves the apiserver logs, exec and port-forward.
	KubeletClientCAFile string

	env *envtest.Environment
	dir string
}

// Options adjust the control plane.
type Options struct {
	// APIServerArgs are added to kube-apiserver's flags (name without dashes → value).
	APIServerArgs map[string]string
	// Out receives the control plane's own logs; nil discards them.
	Out *os.File
	// ServingAddresses, when set, are named in the apiserver's serving certificate besides
	// localhost and the `kubernetes` Service (for pods and processes in other network
	// namespaces), and CAFile is written.
	ServingAddresses []netip.Addr
	// KubeletClientCert gives the apiserver a client certificate for kubelets
	// (--kubelet-client-certificate) and writes KubeletClientCAFile.
	KubeletClientCert bool
}

// Start starts etcd and kube-apiserver and installs the CRDs from config/crd/bases.
func Start(opts Options) (*ControlPlane, error) {
	root, err := ModuleRoot()
	if err != nil {
		return nil, err
	}
	assets, err := AssetsDir(root)
	if err != nil {
		return nil, err
	}
	scheme, err := kube.NewScheme()
	if err != nil {
		return nil, err
	}
	existing := false
	env := &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		CRDDirectoryPaths:        []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing:    true,
		Scheme:                   scheme,
		UseExistingCluster:       &existing,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}
	dir, caFile, kubeletCAFile, err := configure(env, opts)
	if err != nil {
		return nil, err
	}
	cfg, err := env.Start()
	if err != nil {
		// envtest may have launched the processes before failing (a CRD refused, say).
		_ = env.Stop()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", assets, err)
	}
	cp := &ControlPlane{Config: cfg, Scheme: scheme, Kubectl: filepath.Join(assets, "kubectl"), CAFile: caFile,
		KubeletClientCAFile: kubeletCAFile, env: env, dir: dir}
	if err := cp.finish(); err != nil {
		_ = cp.Stop()
		return nil, err
	}
	return cp, nil
}

// configure gives env's etcd and apiserver directories of their own in dir, writes the
// certificates opts asks for (caFile and kubeletCAFile name their CAs, "" when not asked for)
// and sets the apiserver's flags and where the output goes.
func configure(env *envtest.Environment, opts Options) (dir, caFile, kubeletCAFile string, err error) {
	// Our own directories for etcd's data and the apiserver's certificates: envtest removes
	// the ones it creates on every stop, and Restart needs both to survive one.
	if dir, err = os.MkdirTemp("", "portico-controlplane-"); err != nil {
		return "", "", "", err
	}
	env.ControlPlane.Etcd = &envtest.Etcd{DataDir: filepath.Join(dir, "etcd")}
	api := env.ControlPlane.GetAPIServer()
	api.CertDir = filepath.Join(dir, "apiserver")
	for _, d := range []string{env.ControlPlane.Etcd.DataDir, api.CertDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return "", "", "", errors.Join(err, os.RemoveAll(dir))
		}
	}
	if caFile, kubeletCAFile, err = writeCertificates(api, opts); err != nil {
		return "", "", "", errors.Join(err, os.RemoveAll(dir))
	}
	api.Configure().Set("service-cluster-ip-range", ServiceCIDR)
	for k, v := range opts.APIServerArgs {
		api.Configure().Set(k, v)
	}
	if opts.Out != nil {
		env.AttachControlPlaneOutput = true
		api.Out, api.Err = opts.Out, opts.Out
		env.ControlPlane.Etcd.Out, env.ControlPlane.Etcd.Err = opts.Out, opts.Out
	}
	return dir, caFile, kubeletCAFile, nil
}

// writeCertificates writes, in the apiserver's certificate directory, the serving certificate
// for opts.ServingAddresses and the client certificate it shows kubelets, when opts asks.
func writeCertificates(api *envtest.APIServer, opts Options) (caFile, kubeletCAFile string, err error) {
	if len(opts.ServingAddresses) > 0 {
		ca, err := WriteServingCerts(api.CertDir, opts.ServingAddresses)
		if err != nil {
			return "", "", err
		}
		api.SecureServing.CA, caFile = ca, filepath.Join(api.CertDir, "ca.crt")
	}
	if opts.KubeletClientCert {
		if kubeletCAFile, err = writeKubeletClientCerts(api.CertDir); err != nil {
			return "", "", err
		}
		api.Configure().Set("kubelet-client-certificate", filepath.Join(api.CertDir, "kubelet-client.crt"))
		api.Configure().Set("kubelet-client-key", filepath.Join(api.CertDir, "kubelet-client.key"))
	}
	return caFile, kubeletCAFile, nil
}

func (cp *ControlPlane) finish() error {
	c, err := client.New(cp.Config, client.Options{Scheme: cp.Scheme})
	if err != nil {
		return err
	}
	cp.Client = c
	cp.Kubeconfig = filepath.Join(cp.dir, "kubeconfig")
	if err := os.WriteFile(cp.Kubeconfig, cp.env.KubeConfig, 0o600); err != nil {
		return err
	}
	return cp.waitReady()
}

// waitReady waits for the "default" namespace, which exists only once the apiserver's
// bootstrap controller ran.
func (cp *ControlPlane) waitReady() error {
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Minute, true,
		func(ctx context.Context) (bool, error) {
			var ns corev1.Namespace
			return cp.Client.Get(ctx, client.ObjectKey{Name: "default"}, &ns) == nil, nil
		})
	if err != nil {
		return fmt.Errorf("namespace default never appeared: %w", err)
	}
	return nil
}

// Restart crashes kube-apiserver (SIGKILL: with clients watching, its graceful shutdown
// takes a minute), stops etcd (SIGTERM) and starts both again on the same ports with the same
// etcd data and certificates, so clients and the kubeconfig keep working once it returns.
// Between the two, every request fails.
func (cp *ControlPlane) Restart() error {
	api, etcd := cp.env.ControlPlane.APIServer, cp.env.ControlPlane.Etcd
	if err := cp.killAPIServer(); err != nil {
		return err
	}
	if err := etcd.Stop(); err != nil {
		return fmt.Errorf("stopping etcd: %w", err)
	}
	if err := etcd.Start(); err != nil {
		return fmt.Errorf("starting etcd again: %w", err)
	}
	if err := api.Start(); err != nil {
		return fmt.Errorf("starting kube-apiserver again: %w", err)
	}
	return cp.waitReady()
}

// killAPIServer SIGKILLs this control plane's kube-apiserver and waits until envtest has seen
// it exit.
func (cp *ControlPlane) killAPIServer() error {
	pid, _, err := cp.PIDs()
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing kube-apiserver (pid %d): %w", pid, err)
	}
	// Stop returns nil once the process is reaped (and errors while it is being signalled).
	return wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Minute, true,
		func(context.Context) (bool, error) { return cp.env.ControlPlane.APIServer.Stop() == nil, nil })
}

// PIDs finds this control plane's kube-apiserver and etcd processes by their certificate and
// data directories, which are unique to it (benchmarks read their CPU time).
func (cp *ControlPlane) PIDs() (apiserver, etcd int, err error) {
	certDir := "--cert-dir=" + cp.env.ControlPlane.APIServer.CertDir
	dataDir := "--data-dir=" + cp.env.ControlPlane.Etcd.DataDir
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		return 0, 0, err
	}
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		switch {
		case slices.Contains(args, certDir):
			apiserver = pid
		case slices.Contains(args, dataDir):
			etcd = pid
		}
	}
	if apiserver == 0 || etcd == 0 {
		return 0, 0, fmt.Errorf("kube-apiserver with %s or etcd with %s not found", certDir, dataDir)
	}
	return apiserver, etcd, nil
}

// Stop stops kube-apiserver and etcd and removes their data, certificates and the kubeconfig.
func (cp *ControlPlane) Stop() error {
	err := cp.env.Stop()
	if cp.dir != "" {
		err = errors.Join(err, os.RemoveAll(cp.dir))
	}
	return err
}

// Binary is the path of a binary `make controlplane` built, beside kube-apiserver.
func (cp *ControlPlane) Binary(name string) string {
	return filepath.Join(cp.env.BinaryAssetsDirectory, name)
}

// ModuleRoot finds the Portico module's root directory from the working directory up.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(mod), "module github.com/portico-lb/portico\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the Portico module (no go.mod naming github.com/portico-lb/portico above the working directory)")
		}
		dir = parent
	}
}

// AssetsDir is where the control-plane binaries are: $KUBEBUILDER_ASSETS when set, else
// bin/k8s/<Version> under the module root. It fails, naming the fix, when one is missing.
func AssetsDir(root string) (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		dir = filepath.Join(root, "bin", "k8s", Version)
	}
	var missing []string
	for _, b := range Binaries {
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.Mode()&0o111 == 0 {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("control-plane binaries missing in %s: %s; run `make controlplane` "+
			"(builds kube-apiserver %s, etcd and kubectl from source: minutes cold, seconds cached)",
			dir, strings.Join(missing, ", "), Version)
	}
	return dir, nil
}
