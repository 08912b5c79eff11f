package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/controlplane"
	"github.com/portico-lb/portico/internal/netlab"
)

// labEnv carries the lab from the outer test process (root namespace, builds the lab) to the
// inner one (re-executed under `ip netns exec` in the control-plane namespace).
const labEnv = "PORTICO_E2E_L2_LAB"

// l2Lab is the topology: a bridge, the control plane's namespace, a client and three nodes.
type l2Lab struct {
	Speaker  string          // the portico-speaker binary
	Security speakerSecurity // what the speaker DaemonSet grants, given to every speaker
	Switch   string
	CP       netlab.Host
	Client   netlab.Host
	Nodes    []labNode
	Routers  []netlab.Host // BGP routers' namespaces (inBGPLab)
	LAN      []netlab.Host // other hosts on the LAN (inLANLab): 198.51.100.5, .6, ...
}

type labNode struct {
	Name string
	netlab.Host
}

// inLab runs body inside the lab: the outer call builds the namespaces and the speaker binary
// and re-executes the test binary in the control-plane namespace (speakers in the node
// namespaces must reach the apiserver, and nothing may be configured in the root namespace);
// the inner call runs body with a control plane bound to the bridge.
func inLab[T testing.TB](t T, body func(t T, e *l2Env)) { inLabWith(t, 3, 0, nil, body) }

// inLabOf is inLab with n nodes (node-a, node-b, ..., at most 26) instead of three.
func inLabOf[T testing.TB](t T, n int, body func(t T, e *l2Env)) { inLabWith(t, n, 0, nil, body) }

// inBGPLab is inLab with BGP router namespaces on the bridge: 198.51.100.3, .4, ...
func inBGPLab[T testing.TB](t T, routers int, body func(t T, e *l2Env)) {
	inLabWith(t, 3, routers, nil, body)
}

// inLANLab is inLab with more hosts on the LAN, one per role (e.LAN[i] has role lan[i]), at
// 198.51.100.5, .6, ... with MACs 52:54:00:00:05:01, :02, ...
func inLANLab[T testing.TB](t T, lan []string, body func(t T, e *l2Env)) {
	inLabWith(t, 3, 0, lan, body)
}

func inLabWith[T testing.TB](t T, nodes, routers int, lan []string, body func(t T, e *l2Env)) {
	if raw := os.Getenv(labEnv); raw != "" {
		var lab l2Lab
		if err := json.Unmarshal([]byte(raw), &lab); err != nil {
			t.Fatal(err)
		}
		body(t, startEnv(t, &lab))
		return
	}
	tools := []string{"arping", "setpriv"}
	if routers > 0 {
		tools = append(tools, "bird", "birdc", "vtysh", "/usr/lib/frr/bgpd")
	}
	netlab.Require(t, tools...)
	parallel(t)
	l := netlab.New(t)
	lab := newL2Lab(t, l, nodes)
	lab.addRouters(l, routers)
	for i, role := range lan {
		lab.LAN = append(lab.LAN, l.AddHost(role, fmt.Sprintf("52:54:00:00:05:%02x", i+1),
			fmt.Sprintf("198.51.100.%d/24", 5+i), fmt.Sprintf("2001:db8:1::%d/64", 5+i)))
	}
	reexecIn(t, lab.CP.NS, labEnv, lab)
}

// newL2Lab builds the speaker and the namespaces: control plane, client and n nodes (node-a,
// node-b, ... at 198.51.100.11, .12, ...) on the bridge.
func newL2Lab(t testing.TB, l *netlab.Lab, n int) l2Lab {
	if n < 1 || n > 26 {
		t.Fatalf("a lab has 1 to 26 nodes, not %d", n)
	}
	lab := l2Lab{Speaker: buildBinary(t, "./cmd/portico-speaker"), Security: daemonSetSecurity(t), Switch: l.Switch,
		CP:     l.AddHost("cp", "02:00:00:00:00:02", "198.51.100.2/24", "2001:db8:1::2/64"),
		Client: l.AddHost("client", "02:00:00:00:00:01", "198.51.100.1/24", "2001:db8:1::1/64"),
	}
	for i := range n {
		name := "node-" + string(rune('a'+i))
		lab.Nodes = append(lab.Nodes, labNode{Name: name, Host: l.AddHost(name[5:], fmt.Sprintf("02:00:00:00:00:%02x", 0x0a+i),
			fmt.Sprintf("198.51.100.%d/24", 11+i), fmt.Sprintf("2001:db8:1::%d/64", 11+i))})
	}
	return lab
}

// addRouters adds n routers (r1, r2, ... at 198.51.100.3, .4, ...) to the LAN.
func (lab *l2Lab) addRouters(l *netlab.Lab, n int) {
	for i := range n {
		lab.Routers = append(lab.Routers, l.AddHost(fmt.Sprintf("r%d", i+1), fmt.Sprintf("02:00:00:00:01:%02x", i+1),
			fmt.Sprintf("198.51.100.%d/24", 3+i), fmt.Sprintf("2001:db8:1::%d/64", 3+i)))
	}
}

// reexecIn runs the current test (or benchmark) again in namespace ns, handing it lab through
// the environment variable env, and fails when the inner run does not pass.
func reexecIn(t testing.TB, ns, env string, lab any) {
	raw, _ := json.Marshal(lab)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-test.run", "^" + t.Name() + "$", "-test.v", "-test.count=1"}
	if _, isBench := t.(*testing.B); isBench {
		args = []string{"-test.run", "^$", "-test.bench", "^" + t.Name() + "$", "-test.benchtime", "1x", "-test.v"}
	}
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, self}, args...)...)
	cmd.Env = append(os.Environ(), env+"="+string(raw))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	// The inner run's own lines, indented so they are not taken for this process's results.
	t.Log("inner run:\n" + regexp.MustCompile(`(?m)^`).ReplaceAllString(out.String(), "    | "))
	if err != nil {
		t.Fatalf("inner run failed: %v", err)
	}
	if !regexp.MustCompile(`(?m)^PASS$`).MatchString(out.String()) {
		t.Fatal("inner run did not pass")
	}
}

// l2Env is the inner side: the control plane, the speakers and helpers.
type l2Env struct {
	*l2Lab
	t          testing.TB
	extraArgs  []string // added to every speaker's command line
	cp         *controlplane.ControlPlane
	c          client.Client
	kubeconfig string
	logs       string
	speakers   map[string]*labProc
	bgpSockets map[string]string // by node: its BGP container's socket (useBGPContainers)
}

// labProc is a process a lab started in one of its namespaces.
type labProc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
}

// startLogged runs argv in namespace ns (ip netns exec, which execs it: the PID is its own),
// with env added to this process's, its output appended to the file logPath.
func startLogged(t testing.TB, logPath, ns string, env []string, argv ...string) *labProc {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	must(t, err)
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatal(err)
	}
	p := &labProc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(p.done) }()
	return p
}

func startEnv(t testing.TB, lab *l2Lab) *l2Env {
	cpIP := lab.CP.IPv4.Addr().String()
	cp, err := controlplane.Start(controlplane.Options{APIServerArgs: map[string]string{
		"bind-address": "0.0.0.0", "advertise-address": cpIP}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	e := &l2Env{l2Lab: lab, t: t, cp: cp, c: cp.Client, logs: t.TempDir(), speakers: map[string]*labProc{}}
	e.kubeconfig = e.writeKubeconfig(cpIP)
	ctx := context.Background()
	for _, n := range lab.Nodes {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{"kubernetes.io/hostname": n.Name}}}
		must(t, e.c.Create(ctx, node))
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.IPv4.Addr().String()}}
		must(t, e.c.Status().Update(ctx, node))
	}
	for _, n := range lab.Nodes {
		e.startSpeaker(n.Name)
	}
	t.Cleanup(func() {
		for name := range e.speakers {
			e.kill(name, syscall.SIGKILL)
		}
		for _, n := range lab.Nodes {
			checkRaces(t, n.Name+"'s speaker", []byte(e.speakerLog(n.Name)))
		}
		if t.Failed() {
			e.dumpLogs()
		}
	})
	return e
}

// writeKubeconfig points the speakers at the apiserver's bridge address.
func (e *l2Env) writeKubeconfig(ip string) string {
	path := filepath.Join(e.logs, "speaker.kubeconfig")
	must(e.t, e.cp.WriteKubeconfig(path, ip, ""))
	return path
}

func (e *l2Env) node(name string) labNode { return nodeNamed(e.t, e.Nodes, name) }

// nodeNamed is the node of nodes named name; the test fails without one.
func nodeNamed(t testing.TB, nodes []labNode, name string) labNode {
	t.Helper()
	for _, n := range nodes {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("no node %s", name)
	return labNode{}
}

// labHandoffLinger is the lab speakers' hand-off linger: one the tests can wait out (a minute by
// default).
const labHandoffLinger = 5 * time.Second

func (e *l2Env) startSpeaker(name string) {
	n := e.node(name)
	args := append([]string{"--node-name", name, "--kubeconfig", e.kubeconfig, "--l2-handoff-linger=" + labHandoffLinger.String(),
		"--memberlist-bind-address", n.IPv4.Addr().String(), "--metrics-bind-address", n.IPv4.Addr().String() + ":7474"}, e.extraArgs...)
	if socket := e.bgpSockets[name]; socket != "" {
		args = append(args, "--bgp-socket", socket)
	}
	e.speakers[name] = startLogged(e.t, filepath.Join(e.logs, name+".log"), n.NS, e.Security.GoEnv, e.Security.command(e.Speaker, args...)...)
}

// kill signals a speaker (ip netns exec and setpriv exec it, so the PID is the speaker's) and waits for it
// to be gone.
func (e *l2Env) kill(name string, sig syscall.Signal) {
	p := e.speakers[name]
	if p == nil {
		return
	}
	delete(e.speakers, name)
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		e.t.Errorf("%s did not exit within 10s of %v", name, sig)
	}
}

// speakerLog is everything the node's speakers have logged (restarts append).
func (e *l2Env) speakerLog(node string) string {
	b, _ := os.ReadFile(filepath.Join(e.logs, node+".log"))
	return string(b)
}

func (e *l2Env) dumpLogs() {
	for _, n := range e.Nodes {
		b := e.speakerLog(n.Name)
		if len(b) > 20000 {
			b = b[len(b)-20000:]
		}
		e.t.Logf("%s log (tail):\n%s", n.Name, b)
	}
}

// soleAnnouncer waits until exactly one node's Speaker status announces ip, and names it.
func (e *l2Env) soleAnnouncer(ip netip.Addr, within time.Duration) string {
	var owner string
	waitFor(e.t, "one node announces "+ip.String(), within, func() bool {
		a := e.announcers(ip)
		if len(a) == 1 {
			owner = a[0]
		}
		return len(a) == 1
	})
	return owner
}

// announcers lists the nodes whose Speaker status announces ip.
func (e *l2Env) announcers(ip netip.Addr) []string {
	var list v1alpha1.SpeakerList
	if err := e.c.List(context.Background(), &list); err != nil {
		return nil
	}
	var out []string
	for _, s := range list.Items {
		for _, a := range s.Status.Announcements {
			if a.IP == ip.String() {
				out = append(out, s.Name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// macOf returns the MAC of a node by name.
func (e *l2Env) macOf(name string) string { return e.node(name).MAC.String() }

// nodeByMAC names the node with that MAC, or returns the MAC itself.
func (e *l2Env) nodeByMAC(mac string) string {
	for _, n := range e.Nodes {
		if n.MAC.String() == mac {
			return n.Name
		}
	}
	return mac
}

// arpingMACs are the MACs that answer ARP for ip asked from the client.
func (e *l2Env) arpingMACs(ip netip.Addr, count int) []string {
	return netlab.ARPing(e.Client.NS, ip, count)
}

func waitFor(t testing.TB, what string, within time.Duration, cond func() bool) time.Duration {
	t.Helper()
	return netlab.WaitFor(t, what, within, cond)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// parallel lets a lab test run beside the other lab tests (go test's -parallel: make test
// passes 4, GOMAXPROCS by default): each lab has its own namespaces, bridge, control plane and routers' run
// directories, and most of a lab test's time is waiting on timers (BGP connect retries, hold
// and detection times), not the CPU. Benchmarks run alone: their timings are the figures.
func parallel(t testing.TB) {
	if t, ok := t.(*testing.T); ok {
		t.Parallel()
	}
}
