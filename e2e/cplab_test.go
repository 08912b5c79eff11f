package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/portico-lb/portico/internal/controlplane"
	"github.com/portico-lb/portico/internal/netlab"
)

// The control-plane lab (TestControlPlaneVIP): three control-plane nodes on one LAN, each
// running the real kube-apiserver (all against one etcd in a namespace of its own) and a
// portico-speaker in control-plane mode; a client that reaches the API only through the VIP.
// Everything runs as processes in the lab's namespaces, started from the test's own process.

// cpVIP is the Kubernetes API's address the control-plane nodes hold among themselves.
var cpVIP = netip.MustParseAddr("198.51.100.100")

const cpAPIPort = "6443"

type cpLab struct {
	t        *testing.T
	dir      string // certificates, the speakers' configuration, etcd's data, the logs
	speaker  string // the portico-speaker binary
	security speakerSecurity
	etcd     netlab.Host // etcd's namespace; the harness's own checks are made from it too
	switchNS string      // the namespace of the LAN's bridge, where a node's link is cut
	client   netlab.Host
	nodes    []labNode
	config   string // the control-plane mode's configuration file
	ca       []byte // the apiservers' CA (PEM)
	procs    map[string]*labProc
}

// newCPLab builds the namespaces, the certificates and the configuration, and starts etcd.
func newCPLab(t *testing.T) *cpLab {
	l := netlab.New(t)
	lab := &cpLab{t: t, dir: t.TempDir(), speaker: buildBinary(t, "./cmd/portico-speaker"), security: daemonSetSecurity(t),
		etcd:   l.AddHost("etcd", "02:00:00:00:00:05", "198.51.100.5/24", "2001:db8:1::5/64"),
		client: l.AddHost("client", "02:00:00:00:00:01", "198.51.100.1/24", "2001:db8:1::1/64"),
		procs:  map[string]*labProc{}, switchNS: l.Switch}
	addrs := []netip.Addr{cpVIP}
	for i := range 3 {
		name := "cp-" + string(rune('a'+i))
		lab.nodes = append(lab.nodes, labNode{Name: name, Host: l.AddHost(name, fmt.Sprintf("02:00:00:00:00:%02x", 0x0a+i),
			fmt.Sprintf("198.51.100.%d/24", 11+i), fmt.Sprintf("2001:db8:1::%d/64", 11+i))})
		addrs = append(addrs, lab.nodes[i].IPv4.Addr())
	}
	certs := filepath.Join(lab.dir, "pki")
	must(t, os.Mkdir(certs, 0o700))
	var err error
	lab.ca, err = controlplane.WriteServingCerts(certs, addrs)
	must(t, err)
	lab.writeConfig(filepath.Join(certs, "ca.crt"))
	t.Cleanup(func() {
		if t.Failed() {
			lab.dumpLogs()
		}
		for name := range lab.procs {
			lab.signal(name, syscall.SIGKILL)
		}
		for _, n := range lab.nodes {
			checkRaces(t, n.Name+"'s speaker", []byte(lab.log("speaker-"+n.Name)))
		}
	})
	lab.startEtcd()
	return lab
}

// writeConfig writes the control-plane mode's configuration, as every node's would read.
func (lab *cpLab) writeConfig(ca string) {
	var b strings.Builder
	fmt.Fprintf(&b, "vip: %s\nmembers:\n", cpVIP)
	for _, n := range lab.nodes {
		fmt.Fprintf(&b, "  - name: %s\n    address: %s\n", n.Name, n.IPv4.Addr())
	}
	fmt.Fprintf(&b, "readyz:\n  url: https://127.0.0.1:%s/readyz\n  ca: %s\n", cpAPIPort, ca)
	lab.config = filepath.Join(lab.dir, "control-plane.yaml")
	must(lab.t, os.WriteFile(lab.config, []byte(b.String()), 0o600))
}

// start runs argv in namespace ns as process name, its output in the lab's log of that name.
func (lab *cpLab) start(name, ns string, env []string, argv ...string) {
	lab.procs[name] = startLogged(lab.t, filepath.Join(lab.dir, name+".log"), ns, env, argv...)
}

// signal sends sig to process name (ip netns exec execs it, so the PID is its own); for a
// signal that ends it, it waits for it to be gone.
func (lab *cpLab) signal(name string, sig syscall.Signal) {
	p := lab.procs[name]
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	if sig == syscall.SIGSTOP || sig == syscall.SIGCONT {
		return
	}
	if sig == syscall.SIGKILL {
		_ = p.cmd.Process.Signal(syscall.SIGCONT) // a stopped process dies only once it runs
	}
	delete(lab.procs, name)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		lab.t.Errorf("%s did not exit within 30s of %v", name, sig)
	}
}

func (lab *cpLab) startEtcd() {
	url := "http://" + lab.etcd.IPv4.Addr().String() + ":2379"
	bin := filepath.Join(lab.assets(), "etcd")
	lab.start("etcd", lab.etcd.NS, nil, bin, "--data-dir", filepath.Join(lab.dir, "etcd"), "--unsafe-no-fsync",
		"--listen-client-urls", url, "--advertise-client-urls", url, "--listen-peer-urls", "http://127.0.0.1:2380")
}

func (lab *cpLab) assets() string {
	root, err := controlplane.ModuleRoot()
	must(lab.t, err)
	dir, err := controlplane.AssetsDir(root)
	must(lab.t, err)
	return dir
}

// startAPIServer runs node's kube-apiserver: listening on every address of its namespace (so
// that it answers at the VIP when its node holds it), advertising the node's address.
func (lab *cpLab) startAPIServer(node string) {
	n := lab.node(node)
	pki := filepath.Join(lab.dir, "pki")
	certDir := filepath.Join(lab.dir, "apiserver-"+node)
	must(lab.t, os.MkdirAll(certDir, 0o700))
	lab.start("apiserver-"+node, n.NS, nil, filepath.Join(lab.assets(), "kube-apiserver"),
		"--etcd-servers=http://"+lab.etcd.IPv4.Addr().String()+":2379",
		"--bind-address=0.0.0.0", "--advertise-address="+n.IPv4.Addr().String(), "--secure-port="+cpAPIPort,
		"--cert-dir="+certDir, "--tls-cert-file="+filepath.Join(pki, "apiserver.crt"),
		"--tls-private-key-file="+filepath.Join(pki, "apiserver.key"),
		"--service-account-issuer=https://"+cpVIP.String()+":"+cpAPIPort,
		"--service-account-key-file="+filepath.Join(pki, "sa-signer.crt"),
		"--service-account-signing-key-file="+filepath.Join(pki, "sa-signer.key"),
		"--service-cluster-ip-range="+controlplane.ServiceCIDR, "--authorization-mode=RBAC",
		"--disable-admission-plugins=ServiceAccount")
}

// startSpeaker runs node's portico-speaker in control-plane mode, with what the speaker
// DaemonSet grants.
func (lab *cpLab) startSpeaker(node string) {
	lab.start("speaker-"+node, lab.node(node).NS, lab.security.GoEnv,
		lab.security.command(lab.speaker, "--node-name", node, "--control-plane-config", lab.config)...)
}

func (lab *cpLab) node(name string) labNode { return nodeNamed(lab.t, lab.nodes, name) }

func (lab *cpLab) log(name string) string {
	b, _ := os.ReadFile(filepath.Join(lab.dir, name+".log"))
	return string(b)
}

func (lab *cpLab) dumpLogs() {
	names := []string{"etcd"}
	for _, n := range lab.nodes {
		names = append(names, "speaker-"+n.Name, "apiserver-"+n.Name)
	}
	for _, name := range names {
		b := lab.log(name)
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		lab.t.Logf("%s log (tail):\n%s", name, b)
	}
}

// httpsIn is an HTTPS client whose connections are opened in namespace ns, trusting the
// apiservers' CA; a request gives up after timeout.
func (lab *cpLab) httpsIn(ns string, timeout time.Duration) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(lab.ca)
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := netlab.In(ns, func() (err error) {
			c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DialContext: dial, Proxy: nil,
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
}

// ready reports whether GET https://addr:6443/readyz answers 200 through client c.
func ready(c *http.Client, addr netip.Addr) bool {
	resp, err := c.Get("https://" + netip.AddrPortFrom(addr, 6443).String() + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// holders are the nodes with the VIP on their lo (the mode's local address).
func (lab *cpLab) holders() []string {
	var out []string
	for _, n := range lab.nodes {
		addrs, _ := exec.Command("ip", "-n", n.NS, "-o", "addr", "show", "dev", "lo").Output()
		if strings.Contains(string(addrs), " "+cpVIP.String()+"/") {
			out = append(out, n.Name)
		}
	}
	return out
}

// answerers are the nodes whose MAC answers ARP for the VIP, asked from the etcd namespace.
func (lab *cpLab) answerers() []string {
	var out []string
	for _, mac := range netlab.ARPing(lab.etcd.NS, cpVIP, 3) {
		name := mac
		for _, n := range lab.nodes {
			if n.MAC.String() == mac {
				name = n.Name
			}
		}
		out = append(out, name)
	}
	return out
}
