package config_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

// The identities the manifests give the two components.
var (
	controllerSA = "system:serviceaccount:" + systemNamespace + ":portico-controller"
	speakerSA    = "system:serviceaccount:" + systemNamespace + ":portico-speaker"
	saGroups     = []string{"system:serviceaccounts", "system:serviceaccounts:" + systemNamespace, "system:authenticated"}
)

// TestRBAC installs the rendered manifests with server-side apply, then runs the binaries the
// image holds (hack/image), with the args the Deployment and the DaemonSet give them, as their
// ServiceAccounts (impersonation), through their normal work: allocation, Service status,
// events, leader election, pool status, the speaker's plan, its Speaker object and the
// memberlist key. The apiserver's audit log must show no refused request from either; a
// missing rule fails here, not in a user's cluster. SubjectAccessReviews pin what they must
// NOT be able to do: the controller reads no Secret, the speaker only gets Secrets in its own
// namespace, and neither writes the other's objects.
func TestRBAC(t *testing.T) {
	ctx := context.Background()
	auditFrom := auditSize(t)
	out := kubectl(t, "apply", "--server-side", "-f", rendered)
	for _, want := range []string{"deployment.apps/portico-controller serverside-applied", "daemonset.apps/portico-speaker serverside-applied",
		"clusterrole.rbac.authorization.k8s.io/portico-speaker serverside-applied"} {
		if !strings.Contains(out, want) {
			t.Fatalf("kubectl apply --server-side lacks %q:\n%s", want, out)
		}
	}
	bins := imageBinaries(t)
	c := cp.Client

	// What a cluster holds: a node, a pool and an advertisement for the test's namespace, a
	// Service (Local traffic policy) with a ready endpoint on that node. No gossip key: the
	// speaker creates it, as its ServiceAccount.
	const node, ns = "rbac-node", "rbac-test"
	must(t, c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}))
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	must(t, c.Create(ctx, &porticov1.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: "rbac"}, Spec: porticov1.IPAddressPoolSpec{
		Addresses:         []porticov1.AddressRange{"198.51.100.0/28"},
		ServiceAllocation: &porticov1.ServiceAllocation{Priority: 1, Namespaces: []porticov1.Name{ns}}}}))
	// An interface no machine has: the speaker does all its API work, and no frame leaves.
	must(t, c.Create(ctx, &porticov1.L2Advertisement{ObjectMeta: metav1.ObjectMeta{Name: "rbac"}, Spec: porticov1.L2AdvertisementSpec{
		IPAddressPools: []porticov1.Name{"rbac"}, Interfaces: []porticov1.InterfaceName{"portico-none0"}}}))
	addBGPPath(t, "rbac")
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeLoadBalancer, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
		Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80}}}}
	must(t, c.Create(ctx, svc))
	must(t, c.Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.5"}, NodeName: ptr.To(node),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports: []discoveryv1.EndpointPort{{Port: ptr.To[int32](80)}}}))

	// The controller, as the Deployment runs it (loopback ports; the Lease namespace a pod
	// would find in its service-account mount).
	var d appsv1.Deployment
	renderedObject(t, "Deployment", "portico-controller", &d)
	probes := freePort(t)
	const ctrlPod, speakerPod = "rbac-controller", "rbac-speaker"
	ctrlArgs := append(podArgs(t, d.Spec.Template.Spec.Containers[0], ctrlPod, node),
		"--metrics-bind-address=127.0.0.1:"+freePort(t), "--health-probe-bind-address=127.0.0.1:"+probes,
		"--leader-election-namespace="+systemNamespace)
	controller := start(t, filepath.Join(bins, "portico-controller"), impersonating(t, controllerSA, ctrlPod, node),
		[]string{"POD_NAME=" + ctrlPod}, ctrlArgs)

	var ip string
	poll(t, "the controller gives web an address", func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(svc), svc); err != nil {
			return false, err
		}
		if in := svc.Status.LoadBalancer.Ingress; len(in) > 0 {
			ip = in[0].IP
		}
		return ip != "", nil
	})
	if !strings.HasPrefix(ip, "198.51.100.") {
		t.Errorf("web got %s, not from pool rbac", ip)
	}
	poll(t, "pool rbac counts the address", func(ctx context.Context) (bool, error) {
		var p porticov1.IPAddressPool
		err := c.Get(ctx, client.ObjectKey{Name: "rbac"}, &p)
		return err == nil && p.Status.Assigned == 1, err
	})
	poll(t, "the controller holds the leader Lease", func(ctx context.Context) (bool, error) {
		var l coordinationv1.Lease
		err := c.Get(ctx, client.ObjectKey{Namespace: systemNamespace, Name: "portico-controller.portico.dev"}, &l)
		return err == nil && ptr.Deref(l.Spec.HolderIdentity, "") != "", client.IgnoreNotFound(err)
	})
	probesAnswer(t, "the controller", d.Spec.Template.Spec.Containers[0], probes)

	// A speaker, as the DaemonSet runs it on node rbac-node.
	var ds appsv1.DaemonSet
	renderedObject(t, "DaemonSet", "portico-speaker", &ds)
	spProbes := freePort(t)
	// The pod's two containers, the speaker and its bgp container, which meet at a socket in
	// the pod's run volume (a directory of the test's here).
	run := t.TempDir()
	inRun := func(args []string) []string {
		for i := range args {
			args[i] = strings.ReplaceAll(args[i], "=/run/portico/", "="+run+"/")
		}
		return args
	}
	spArgs := append(inRun(podArgs(t, ds.Spec.Template.Spec.Containers[0], speakerPod, node)),
		"--memberlist-bind-address=127.0.0.1", "--memberlist-port="+freePort(t), "--metrics-bind-address=127.0.0.1:"+freePort(t),
		"--health-probe-bind-address=127.0.0.1:"+spProbes)
	speaker := start(t, filepath.Join(bins, "portico-speaker"), impersonating(t, speakerSA, speakerPod, node), []string{"NODE_NAME=" + node}, spArgs)
	start(t, filepath.Join(bins, "portico-speaker"), "", []string{"NODE_NAME=" + node}, inRun(podArgs(t, ds.Spec.Template.Spec.Containers[1], speakerPod, node)))
	poll(t, "the speaker reports "+ip+" in Speaker "+node, func(ctx context.Context) (bool, error) {
		var sp porticov1.Speaker
		if err := c.Get(ctx, client.ObjectKey{Name: node}, &sp); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return slices.ContainsFunc(sp.Status.Announcements, func(a porticov1.Announcement) bool { return a.IP == ip }), nil
	})
	checkBGPPath(t, node, ip)
	var key corev1.Secret
	must(t, c.Get(ctx, client.ObjectKey{Namespace: systemNamespace, Name: "portico-memberlist"}, &key))
	if n := len(key.Data["secretkey"]); n != 32 {
		t.Errorf("the speaker created a gossip key of %d bytes, want 32", n)
	}
	probesAnswer(t, "the speaker", ds.Spec.Template.Spec.Containers[0], spProbes)
	poll(t, "events IPAllocated (controller) and Announced (speaker) on web", func(ctx context.Context) (bool, error) {
		var evs corev1.EventList
		if err := c.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return false, err
		}
		var reasons []string
		for _, e := range evs.Items {
			reasons = append(reasons, e.Reason)
		}
		return slices.Contains(reasons, "IPAllocated") && slices.Contains(reasons, "Announced"), nil
	})

	poll(t, "the speaker renews its Lease", func(ctx context.Context) (bool, error) {
		var l coordinationv1.Lease
		err := c.Get(ctx, client.ObjectKey{Namespace: systemNamespace, Name: "speaker-" + node}, &l)
		return err == nil && ptr.Deref(l.Spec.HolderIdentity, "") == node, client.IgnoreNotFound(err)
	})

	// Clean shutdowns too: the leader releases its Lease, the speaker leaves and deletes its own.
	controller.stop(t)
	speaker.stop(t)
	if err := c.Get(ctx, client.ObjectKey{Namespace: systemNamespace, Name: "speaker-" + node}, &coordinationv1.Lease{}); !apierrors.IsNotFound(err) {
		t.Errorf("the stopped speaker's Lease: got %v, want NotFound", err)
	}
	checkAudit(t, auditFrom, map[string]bool{controllerSA: true, speakerSA: true})

	// And a real request: RBAC is enforced for these identities, the controller gets no Secret.
	cfg := rest.CopyConfig(cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: controllerSA, Groups: saGroups}
	asController, err := client.New(cfg, client.Options{Scheme: cp.Scheme})
	must(t, err)
	var sec corev1.Secret
	if err := asController.Get(ctx, client.ObjectKey{Namespace: systemNamespace, Name: "portico-memberlist"}, &sec); !apierrors.IsForbidden(err) {
		t.Errorf("the controller reading the memberlist Secret: got %v, want Forbidden", err)
	}
}

// TestRBACLimits pins what each identity must not do (and the few things it must), asked of
// the real authorizer with SubjectAccessReviews against the applied manifests.
func TestRBACLimits(t *testing.T) {
	kubectl(t, "apply", "--server-side", "-f", rendered)
	type ask struct {
		user, verb, group, resource, ns, name string
		allowed                               bool
	}
	var asks []ask
	for _, ns := range []string{systemNamespace, "default", "kube-system", ""} {
		for _, verb := range []string{"get", "list", "watch"} {
			asks = append(asks, ask{controllerSA, verb, "", "secrets", ns, "", false})
		}
		asks = append(asks, ask{speakerSA, "list", "", "secrets", ns, "", false}, ask{speakerSA, "watch", "", "secrets", ns, "", false})
	}
	asks = append(asks,
		ask{speakerSA, "get", "", "secrets", systemNamespace, "portico-memberlist", true},
		// Only the Secrets it needs, by name: not a Helm release's, nor a BGP password nobody granted.
		ask{speakerSA, "get", "", "secrets", systemNamespace, "sh.helm.release.v1.portico.v1", false},
		ask{speakerSA, "get", "", "secrets", systemNamespace, "bgp-password", false},
		ask{speakerSA, "get", "", "secrets", systemNamespace, "", false},
		ask{speakerSA, "get", "", "secrets", "default", "portico-memberlist", false},
		ask{speakerSA, "get", "", "secrets", "kube-system", "bgp-password", false},
		ask{speakerSA, "get", "", "secrets", "", "", false},
		// The speakers may create the gossip key (the admission policy keeps create to that one
		// name: config/policy_test.go) and never change or delete a Secret.
		ask{speakerSA, "create", "", "secrets", systemNamespace, "", true},
		ask{speakerSA, "create", "", "secrets", "default", "", false},
		ask{speakerSA, "update", "", "secrets", systemNamespace, "portico-memberlist", false},
		ask{speakerSA, "patch", "", "secrets", systemNamespace, "portico-memberlist", false},
		ask{speakerSA, "delete", "", "secrets", systemNamespace, "portico-memberlist", false},
		// One writer per object: Service and pool status are the controller's, Speakers the speakers'.
		ask{controllerSA, "update", "", "services/status", "default", "", true},
		ask{speakerSA, "update", "", "services/status", "default", "", false},
		ask{speakerSA, "update", "portico.dev", "ipaddresspools/status", "", "", false},
		ask{speakerSA, "update", "portico.dev", "speakers/status", "", "", true},
		ask{controllerSA, "update", "portico.dev", "speakers/status", "", "", false},
		ask{controllerSA, "create", "portico.dev", "speakers", "", "", false},
		// Neither changes what users wrote.
		ask{controllerSA, "update", "", "services", "default", "", false},
		ask{speakerSA, "update", "", "services", "default", "", false},
		ask{controllerSA, "update", "portico.dev", "ipaddresspools", "", "", false},
		ask{speakerSA, "delete", "portico.dev", "l2advertisements", "", "", false},
		// Leader election stays in Portico's namespace.
		ask{controllerSA, "update", "coordination.k8s.io", "leases", systemNamespace, "portico-controller.portico.dev", true},
		ask{controllerSA, "update", "coordination.k8s.io", "leases", systemNamespace, "speaker-node-a", false},
		ask{controllerSA, "delete", "coordination.k8s.io", "leases", systemNamespace, "portico-controller.portico.dev", false},
		ask{controllerSA, "update", "coordination.k8s.io", "leases", "kube-system", "", false},
		// The speakers renew their own Leases there (the admission policy keeps each to its
		// own: config/policy_test.go), nowhere else.
		ask{speakerSA, "update", "coordination.k8s.io", "leases", systemNamespace, "", true},
		ask{speakerSA, "update", "coordination.k8s.io", "leases", "kube-system", "", false},
		ask{speakerSA, "list", "coordination.k8s.io", "leases", systemNamespace, "", false},
		// A speaker reads its own DaemonSet as it stops, and no other.
		ask{speakerSA, "get", "apps", "daemonsets", systemNamespace, "portico-speaker", true},
		ask{speakerSA, "get", "apps", "daemonsets", systemNamespace, "portico-controller", false},
		ask{speakerSA, "list", "apps", "daemonsets", systemNamespace, "", false},
		ask{speakerSA, "update", "apps", "daemonsets", systemNamespace, "portico-speaker", false},
		ask{controllerSA, "watch", "coordination.k8s.io", "leases", systemNamespace, "", true},
		ask{controllerSA, "watch", "coordination.k8s.io", "leases", "", "", false},
	)
	for _, a := range asks {
		res, sub := "", ""
		res, sub, _ = strings.Cut(a.resource, "/")
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: a.user, Groups: saGroups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: a.verb, Group: a.group, Resource: res,
				Subresource: sub, Namespace: a.ns, Name: a.name}}}
		must(t, cp.Client.Create(context.Background(), sar))
		if sar.Status.Allowed != a.allowed {
			where := a.ns
			if where == "" {
				where = "(all namespaces)"
			}
			t.Errorf("%s %s %s %s/%s in %s: allowed=%v, want %v", short(a.user), a.verb, a.group, a.resource, a.name, where, sar.Status.Allowed, a.allowed)
		}
	}
}

// probesAnswer waits until the container's readiness and liveness probes (HTTP GETs at the
// paths the manifests give) succeed against the process listening on loopback port.
func probesAnswer(t *testing.T, who string, c corev1.Container, port string) {
	t.Helper()
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Fatalf("%s has no HTTP readiness and liveness probes", who)
		}
		poll(t, who+"'s probe answers on "+p.HTTPGet.Path, func(ctx context.Context) (bool, error) {
			resp, err := http.Get("http://127.0.0.1:" + port + p.HTTPGet.Path)
			if err != nil {
				return false, nil
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, nil
		})
	}
}

func short(user string) string { return user[strings.LastIndex(user, ":")+1:] }

// auditSize is where the audit log ends now: the requests a test makes are recorded after it.
func auditSize(t *testing.T) int64 {
	t.Helper()
	fi, err := os.Stat(auditLog)
	must(t, err)
	return fi.Size()
}

// checkAudit fails on any request by users that the apiserver refused, and when a user made
// no request at all (then it did not run under that identity and proved nothing). It reads
// the log from offset on, so the refusals other tests provoke on purpose do not count.
func checkAudit(t *testing.T, offset int64, users map[string]bool) {
	t.Helper()
	type event struct {
		Stage            string
		Verb             string
		RequestURI       string
		ImpersonatedUser *struct{ Username string }
		ObjectRef        *struct{ Resource, Subresource, APIGroup string }
		ResponseStatus   *struct {
			Code    int
			Message string
		}
	}
	f, err := os.Open(auditLog)
	must(t, err)
	defer f.Close()
	_, err = f.Seek(offset, io.SeekStart)
	must(t, err)
	used := map[string]map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit log: %v", err)
		}
		if e.ImpersonatedUser == nil || !users[e.ImpersonatedUser.Username] || e.Stage != "ResponseComplete" {
			continue
		}
		u := short(e.ImpersonatedUser.Username)
		what := e.Verb + " " + e.RequestURI
		if e.ObjectRef != nil {
			what = e.Verb + " " + strings.TrimPrefix(e.ObjectRef.APIGroup+"/"+e.ObjectRef.Resource, "/")
			if e.ObjectRef.Subresource != "" {
				what += "/" + e.ObjectRef.Subresource
			}
		}
		if used[u] == nil {
			used[u] = map[string]bool{}
		}
		used[u][what] = true
		// A new leader's probe (a dry run) is refused until the apiserver sees it hold the Lease:
		// that is what it asks (controller/lease.go, confirmTenure).
		probe := strings.Contains(e.RequestURI, "dryRun=All")
		if e.ResponseStatus != nil && e.ResponseStatus.Code == http.StatusForbidden && !probe {
			t.Errorf("%s was refused: %s (%s)", u, e.RequestURI, e.ResponseStatus.Message)
		}
	}
	must(t, sc.Err())
	for user := range users {
		u := short(user)
		if len(used[u]) == 0 {
			t.Errorf("no request from %s in the audit log", u)
		}
		t.Logf("%s used: %s", u, strings.Join(slices.Sorted(func(yield func(string) bool) {
			for k := range used[u] {
				if !yield(k) {
					return
				}
			}
		}), ", "))
	}
}

// impersonating writes a kubeconfig that acts as user (a ServiceAccount) through the admin's
// credentials, with pod and node in the user extra info as the token of a pod on that node has
// them.
func impersonating(t *testing.T, user, pod, node string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(cp.Kubeconfig)
	must(t, err)
	for _, ai := range cfg.AuthInfos {
		ai.Impersonate, ai.ImpersonateGroups = user, saGroups
		ai.ImpersonateUserExtra = map[string][]string{podNameExtra: {pod}, nodeNameExtra: {node}}
	}
	path := filepath.Join(t.TempDir(), short(user)+".kubeconfig")
	must(t, clientcmd.WriteToFile(*cfg, path))
	return path
}

// podArgs are a container's args with $(VAR) expanded as the kubelet does, from the downward
// API values pod on node would get.
func podArgs(t *testing.T, c corev1.Container, pod, node string) []string {
	t.Helper()
	fields := map[string]string{"spec.nodeName": node, "metadata.name": pod, "metadata.namespace": systemNamespace, "status.hostIP": "127.0.0.1"}
	args := slices.Clone(c.Args)
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			var ok bool
			if v, ok = fields[e.ValueFrom.FieldRef.FieldPath]; !ok {
				t.Fatalf("env %s: no test value for field %s", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		}
		for i := range args {
			args[i] = strings.ReplaceAll(args[i], "$("+e.Name+")", v)
		}
	}
	for _, a := range args {
		if strings.Contains(a, "$(") {
			t.Fatalf("arg %q refers to a variable the container does not define", a)
		}
	}
	return args
}

type process struct {
	cmd  *exec.Cmd
	done chan error
}

func start(t *testing.T, bin, kubeconfig string, env, args []string) *process {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), filepath.Base(bin)+".log")
	log, err := os.Create(logPath)
	must(t, err)
	p := &process{cmd: exec.Command(bin, args...), done: make(chan error, 1)}
	p.cmd.Env = append(append(os.Environ(), "KUBECONFIG="+kubeconfig), env...)
	p.cmd.Stdout, p.cmd.Stderr = log, log
	must(t, p.cmd.Start())
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			t.Logf("end of %s's log:\n%s", filepath.Base(bin), b)
		}
	})
	return p
}

// stop sends SIGTERM and waits for a clean exit.
func (p *process) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup
		if err != nil {
			t.Errorf("%s exited with %v after SIGTERM", filepath.Base(p.cmd.Path), err)
		}
	case <-time.After(time.Minute):
		t.Errorf("%s did not exit within a minute of SIGTERM", filepath.Base(p.cmd.Path))
	}
}

func poll(t *testing.T, what string, cond wait.ConditionWithContextFunc) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer l.Close()
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
