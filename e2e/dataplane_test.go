package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/internal/netlab"
)

// lbService describes a LoadBalancer Service for the data-plane lab.
type lbService struct {
	name     string
	selector string // value of the app label
	port     int32  // Service port, to the pods' port of the same use
	target   string // named container port: "http" (3000) or "metrics" (9090)
	local    bool   // externalTrafficPolicy: Local
	shareKey string // allow-shared-ip annotation
}

// create writes the Service and waits for the real portico-controller to give it an address.
// Services stay until the lab ends, so every test gets an address of its own and never meets
// rules kube-proxy still holds for an earlier Service.
func (e *dpEnv) create(s lbService) (*corev1.Service, netip.Addr) {
	e.t.Helper()
	ctx := context.Background()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: "default", Annotations: map[string]string{}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": s.selector},
			Ports: []corev1.ServicePort{{Name: s.target, Port: s.port, TargetPort: intstr.FromString(s.target)}}}}
	if s.local {
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}
	if s.shareKey != "" {
		svc.Annotations[v1alpha1.AnnotationAllowSharedIP] = s.shareKey
	}
	must(e.t, e.c.Create(ctx, svc))
	var ip netip.Addr
	waitFor(e.t, s.name+" gets an EXTERNAL-IP", 30*time.Second, func() bool {
		if e.c.Get(ctx, client.ObjectKey{Namespace: "default", Name: s.name}, svc) != nil || len(svc.Status.LoadBalancer.Ingress) == 0 {
			return false
		}
		ip = netip.MustParseAddr(svc.Status.LoadBalancer.Ingress[0].IP)
		return true
	})
	return svc, ip
}

// answer splits a pod's answer into the pod's name and the client address it saw.
func answer(body string) (pod string, from netip.AddrPort) {
	f := strings.Fields(body)
	if len(f) != 2 {
		return "", netip.AddrPort{}
	}
	from, _ = netip.ParseAddrPort(f[1])
	return f[0], from
}

// reach waits until a GET on url from the client succeeds and returns the answering pod.
func (e *dpEnv) reach(url string, within time.Duration) (pod string, from netip.AddrPort) {
	e.t.Helper()
	waitFor(e.t, "GET "+url+" from the client", within, func() bool {
		body, err := e.get(url)
		pod, from = answer(body)
		return err == nil && pod != ""
	})
	return pod, from
}

// checkEndpointsCondition is where the Service's own account of its endpoints is asserted
// alongside the request: issue 6 (helper "explain") adds the EndpointsReady condition with
// reason NoEndpoints and a hint naming the selector. Until that lands on main there is no
// condition to read, so this checks nothing; on merge it asserts that the condition is False
// with reason NoEndpoints when ready is false, and True when ready is true.
func checkEndpointsCondition(t *testing.T, e *dpEnv, svc *corev1.Service, ready bool) {
	t.Helper()
	_, _, _ = e, svc, ready
}

func TestDataplane(t *testing.T) {
	inDataplaneLab(t, func(t *testing.T, e *dpEnv) {
		t.Run("a client reaches gitea through the EXTERNAL-IP", func(t *testing.T) {
			e.t = t
			_, ip := e.create(lbService{name: "gitea", selector: "gitea", port: 80, target: "http"})
			url := fmt.Sprintf("http://%s/", ip)
			pod, _ := e.reach(url, 30*time.Second)
			t.Logf("GET %s answered by %s", url, pod)
			// kube-proxy spreads new connections over the three pods, one per node: every
			// pod answers, so the announcing node reaches pods on the other nodes too.
			seen := map[string]bool{pod: true}
			waitFor(t, "every gitea pod answers through "+ip.String(), 30*time.Second, func() bool {
				body, err := e.get(url)
				if p, _ := answer(body); err == nil && p != "" {
					seen[p] = true
				}
				return len(seen) == len(e.lab.Pods)
			})
		})

		t.Run("externalTrafficPolicy Local reaches only the announcing node's pod and keeps the client's address", func(t *testing.T) {
			e.t = t
			_, ip := e.create(lbService{name: "gitea-local", selector: "gitea", port: 80, target: "http", local: true})
			url := fmt.Sprintf("http://%s/", ip)
			e.reach(url, 30*time.Second)
			var owner string
			waitFor(t, "one node announces "+ip.String(), 10*time.Second, func() bool {
				a := e.announcers(ip)
				if len(a) == 1 {
					owner = a[0]
				}
				return len(a) == 1
			})
			want := e.podOn(owner)
			for i := 0; i < 30; i++ {
				body, err := e.get(url)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				pod, from := answer(body)
				if pod != want {
					t.Fatalf("request %d reached %s; only %s runs on the announcing node %s", i, pod, want, owner)
				}
				if from.Addr() != e.Client.IPv4.Addr() {
					t.Fatalf("request %d: the pod saw the client as %v, want the client's own %v", i, from, e.Client.IPv4.Addr())
				}
			}
		})

		t.Run("a selector off by one character fails the request until it is fixed", func(t *testing.T) {
			e.t = t
			svc, ip := e.create(lbService{name: "gitea-typo", selector: "gite", port: 80, target: "http"})
			url := fmt.Sprintf("http://%s/", ip)
			var owner string
			waitFor(t, "one node announces "+ip.String(), 20*time.Second, func() bool {
				a := e.announcers(ip)
				if len(a) == 1 {
					owner = a[0]
				}
				return len(a) == 1
			})
			// The address is announced and kube-proxy on the owner has programmed the Service
			// (it rejects traffic for Services without endpoints): the request reaches the
			// node and fails there, for want of endpoints and for nothing else.
			owningNS := e.node(owner).NS
			waitFor(t, "kube-proxy on "+owner+" programs "+ip.String(), 20*time.Second, func() bool {
				rules := nftRuleset(owningNS)
				return strings.Contains(rules, ip.String()) && strings.Contains(rules, "default/gitea-typo")
			})
			for i := 0; i < 5; i++ {
				if body, err := e.get(url); err == nil {
					t.Fatalf("GET %s answered %q although no pod matches app=gite", url, body)
				}
			}
			checkEndpointsCondition(t, e, svc, false)

			svc.Spec.Selector = map[string]string{"app": "gitea"}
			must(t, e.c.Update(context.Background(), svc))
			pod, _ := e.reach(url, 30*time.Second)
			t.Logf("after fixing the selector GET %s answered by %s", url, pod)
			checkEndpointsCondition(t, e, svc, true)
		})

		t.Run("requests succeed again after the owner's link is cut", func(t *testing.T) {
			e.t = t
			svc, ip := e.create(lbService{name: "gitea-failover", selector: "gitea", port: 80, target: "http"})
			owner, next := e.podBehindThirdNode(svc, ip)
			e.settle(ip, owner)
			_, heal := e.hurt(owner, "link cut")
			// The client keeps its neighbour entry; only the next owner's announcement can
			// bring requests back while the owner is cut off.
			url := fmt.Sprintf("http://%s/", ip)
			waitFor(t, "GET "+url+" answers again through "+next, 20*time.Second, func() bool {
				_, err := e.get(url)
				return err == nil && netlab.Neighbour(e.Client.NS, ip) == e.macOf(next)
			})
			heal()
			e.settle(ip, owner)
			e.reach(url, 10*time.Second)
		})

		t.Run("two Services sharing an address both answer", func(t *testing.T) {
			e.t = t
			_, web := e.create(lbService{name: "gitea-web", selector: "gitea", port: 80, target: "http", shareKey: "gitea"})
			_, metrics := e.create(lbService{name: "gitea-metrics", selector: "gitea", port: podMetricsPort, target: "metrics", shareKey: "gitea"})
			if web != metrics {
				t.Fatalf("gitea-web got %v and gitea-metrics %v; the sharing key should give them one address", web, metrics)
			}
			for _, url := range []string{fmt.Sprintf("http://%s/", web), fmt.Sprintf("http://%s:%d/", web, podMetricsPort)} {
				pod, _ := e.reach(url, 30*time.Second)
				t.Logf("GET %s answered by %s", url, pod)
			}
		})
	})
}

// nftRuleset is the nftables ruleset of namespace ns, or "" when it cannot be read.
func nftRuleset(ns string) string {
	out, _ := exec.Command("ip", "netns", "exec", ns, "nft", "list", "ruleset").Output()
	return string(out)
}
