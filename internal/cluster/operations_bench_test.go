package cluster_test

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/portico-lb/portico/internal/cluster"
	"github.com/portico-lb/portico/internal/netlab"
)

// giteaIP is the address the operations are measured at: the first the home-lab pool hands out.
var giteaIP = netip.MustParseAddr("10.0.0.200")

// A target is the Service a client is measured at: app's Deployment of the echo image (whose
// answers begin with app) at ip. Over L2 one node answers for ip, and the operations aim at it.
type target struct {
	app      string
	ip       netip.Addr
	l2       bool
	routerNS string // over BGP: the router's namespace, whose next hops to ip are followed
}

var gitea = target{app: "gitea", ip: giteaIP, l2: true}

// An operation is something users do to a running cluster. do performs it on owner (the node
// answering for giteaIP) and returns once it has taken effect; undo, when set, puts the
// cluster back (uncordon, restart, plug the cable in again).
type operation struct {
	key, name string
	do, undo  func(e *labEnv, owner *cluster.Node)
}

var operations = []operation{
	{"delete-pod", "`kubectl delete pod` of the owning speaker", deleteSpeakerPod, nil},
	{"kill-speaker", "the owning speaker killed with SIGKILL", killSpeaker, nil},
	{"runtime-stop", "the owner's kubelet and containerd stopped", stopRuntime, startRuntime},
	{"link-cut", "the owner's link cut", cutLink, healLink},
	{"drain", "`kubectl drain` of the owner", drain, uncordon},
	{"leader-deleted", "the controller leader's pod deleted", deleteLeader, nil},
	{"upgrade-speaker", "rolling upgrade of the speaker DaemonSet", upgrade("daemonset/portico-speaker", "speaker"), nil},
	{"upgrade-controller", "rolling upgrade of the controller Deployment", upgrade("deployment/portico-controller", "controller"), nil},
}

// runFigures are one run of an operation as measure saw it.
type runFigures struct {
	clientFigures
	moves          map[netip.Addr]int // L2: how often each home-lab address moved to another node
	nextHopChanges int                // BGP: how often the router's next hops to the address changed
	load           string             // the load average (1, 5, 15 min) at the end of the run
}

// measure runs op once while the client GETs tg's address every 10 ms on a new connection and
// on keepAlive long-lived connections (startProbe), from before the operation until the
// cluster has settled again (settled), 100 more answers came back and no address moved for
// quietFor. Over L2 a machine on the
// LAN asks who answers for each home-lab address meanwhile and counts their moves
// (watchOwners); over BGP the router's next hops are read every 10 ms, and a moment with
// fewer than all nodes but one fails the run. No Service's EXTERNAL-IP may change across any
// operation: a test failure, not a number.
// Over L2 the app's pod is kept off the owner first, so what is measured is the address's
// hand-over, not the app's own restart elsewhere (which a single replica on the node would add).
func measure(e *labEnv, op operation, tg target, keepAlive int) runFigures {
	var owner *cluster.Node
	if tg.l2 {
		owner = ownerOf(e, tg.ip)
	} else if op.undo != nil {
		owner = e.c.Nodes[0] // over BGP every node advertises: the operation is on one of them
	}
	if owner != nil {
		e.kubectl("patch", "deployment", tg.app, "--type=merge", "-p", fmt.Sprintf(`{"spec":{"template":{"spec":{"affinity":`+
			`{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":`+
			`[{"key":"kubernetes.io/hostname","operator":"NotIn","values":[%q]}]}]}}}}}}}`, owner.Name))
		e.kubectl("rollout", "status", "deployment/"+tg.app, "--timeout=3m")
		waitFor(e.t, "no pod of "+tg.app+" leaving", 2*time.Minute, func() (bool, string) {
			var pods corev1.PodList
			if err := e.c.CP.Client.List(context.Background(), &pods, client.InNamespace("default"),
				client.MatchingLabels{"app": tg.app}); err != nil {
				return false, err.Error()
			}
			return !slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil }), ""
		})
		e.t.Logf("%s is the node operated on for %s", owner.Name, tg.ip)
	}
	settled(e)
	before := ingresses(e)
	// The probe counts from 50 answers in a row on, and every keep-alive connection answering
	// (the echo app answers on for a while after SIGTERM, so the pod the patch replaced
	// fails no connection on its way out).
	p := startProbe(e, "http://"+tg.ip.String()+"/", tg.app, keepAlive)
	waitFor(e.t, "50 answers in a row before "+op.name, 2*time.Minute, func() (bool, string) {
		n, ka := p.answersInARow(), p.keepAliveAnswering()
		return n >= 50 && ka == keepAlive, fmt.Sprintf("%d in a row, %d of %d keep-alive connections answering", n, ka, keepAlive)
	})
	var owners *ownerWatch
	if tg.l2 {
		owners = watchOwners(e, homeLabAddresses)
		owners.settle(e)
	}
	p.reset()
	var hops *nextHopWatch
	if tg.routerNS != "" {
		hops = watchNextHops(e, tg.routerNS, tg.ip)
	}
	e.t.Logf("%s begins at %s", op.name, time.Now().Format("15:04:05.000"))
	op.do(e, owner)
	if op.undo != nil {
		e.t.Logf("undoing it at %s", time.Now().Format("15:04:05.000"))
		op.undo(e, owner)
	}
	settled(e)
	p.mark()
	waitFor(e.t, "100 answers after "+op.name, time.Minute, func() (bool, string) {
		n := p.answersSinceMark()
		return n >= 100, fmt.Sprintf("%d", n)
	})
	// An address may move back some seconds after the cluster settled (a node whose link came
	// back rejoins the others first): the run, and the client, go on until nothing moved for
	// quietFor.
	var watch interface{ quietSince() time.Time }
	if owners != nil {
		watch = owners
	} else if hops != nil {
		watch = hops
	}
	if watch != nil {
		waitFor(e.t, fmt.Sprintf("%s without a move after %s", quietFor, op.name), 2*time.Minute, func() (bool, string) {
			since := time.Since(watch.quietSince())
			return since >= quietFor, fmt.Sprintf("last move %s ago", since.Round(time.Millisecond))
		})
	}
	r := runFigures{clientFigures: p.stop(), load: loadAverage()}
	if len(p.failures) > 0 {
		e.t.Logf("%s: failed requests: %s", op.name, strings.Join(p.failures, "; "))
	}
	if owners != nil {
		var seen string
		r.moves, seen = owners.stop()
		e.t.Logf("%s: owners: %s", op.name, seen)
	}
	if hops != nil {
		var fewest int
		r.nextHopChanges, fewest = hops.stop()
		e.t.Logf("%s: the router's next hops to %s changed %d times, at least %d of %d kept", op.name, tg.ip, r.nextHopChanges, fewest, len(e.c.Nodes))
		if fewest < len(e.c.Nodes)-1 {
			e.t.Errorf("%s left the router with %d of %d next hops to %s", op.name, fewest, len(e.c.Nodes), tg.ip)
		}
	}
	if after := ingresses(e); !maps.Equal(before, after) {
		e.t.Errorf("%s changed EXTERNAL-IPs: before %v, after %v", op.name, before, after)
	}
	return r
}

// quietFor is how long no address may have moved before a run ends: the longest move back
// seen after the cluster had settled (a link cut's, 2.5 s after the link came back) with room
// to spare.
const quietFor = 5 * time.Second

// loadAverage is the machine's load average as /proc/loadavg gives it (1, 5 and 15 minutes).
func loadAverage() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// ownerOf is the node answering ARP for ip, once the client's own entry names it too.
func ownerOf(e *labEnv, ip netip.Addr) *cluster.Node {
	var owner *cluster.Node
	waitFor(e.t, "one node answering for "+ip.String()+", in the client's entry", time.Minute, func() (bool, string) {
		owner = nil
		macs := netlab.ARPing(e.c.Client.NS, ip, 1)
		entry := netlab.Resolve(e.c.Client.NS, ip)
		for _, n := range e.c.Nodes {
			if len(macs) == 1 && strings.EqualFold(macs[0], n.MAC.String()) && strings.EqualFold(entry, macs[0]) {
				owner = n
			}
		}
		return owner != nil, fmt.Sprintf("ARP answered by %v, the client's entry %s", macs, entry)
	})
	return owner
}

// movedOff waits until the client's neighbour entry for giteaIP names another node than
// owner: the gratuitous ARP of the next owner arrived.
func movedOff(e *labEnv, owner *cluster.Node, within time.Duration) {
	start := time.Now()
	waitFor(e.t, giteaIP.String()+" moved off "+owner.Name, within, func() (bool, string) {
		mac := netlab.Neighbour(e.c.Client.NS, giteaIP)
		return mac != "" && !strings.EqualFold(mac, owner.MAC.String()), "the client's entry: " + mac
	})
	e.t.Logf("%s moved off %s %s after the operation", giteaIP, owner.Name, time.Since(start).Round(time.Millisecond))
}

// ingresses maps every Service to its EXTERNAL-IPs.
func ingresses(e *labEnv) map[string]string {
	var svcs corev1.ServiceList
	if err := e.c.CP.Client.List(context.Background(), &svcs); err != nil {
		e.t.Fatal(err)
	}
	out := map[string]string{}
	for _, s := range svcs.Items {
		var ips []string
		for _, ing := range s.Status.LoadBalancer.Ingress {
			ips = append(ips, ing.IP)
		}
		out[s.Namespace+"/"+s.Name] = strings.Join(ips, ",")
	}
	return out
}

// settled waits until every node is Ready and schedulable and Portico's controller Deployment
// and speaker DaemonSet are fully rolled out and Ready.
func settled(e *labEnv) {
	ctx := context.Background()
	waitFor(e.t, "the cluster settled", 4*time.Minute, func() (bool, string) {
		var nodes corev1.NodeList
		if err := e.c.CP.Client.List(ctx, &nodes); err != nil {
			return false, err.Error()
		}
		for i := range nodes.Items {
			if n := &nodes.Items[i]; !cluster.NodeReady(n) || n.Spec.Unschedulable {
				return false, n.Name + " not Ready or cordoned"
			}
		}
		var d appsv1.Deployment
		var ds appsv1.DaemonSet
		if err := e.c.CP.Client.Get(ctx, client.ObjectKey{Namespace: "portico-system", Name: "portico-controller"}, &d); err != nil {
			return false, err.Error()
		}
		if err := e.c.CP.Client.Get(ctx, client.ObjectKey{Namespace: "portico-system", Name: "portico-speaker"}, &ds); err != nil {
			return false, err.Error()
		}
		want := *d.Spec.Replicas
		nodeCount := int32(len(e.c.Nodes))
		ok := d.Status.ObservedGeneration == d.Generation && d.Status.Replicas == want && d.Status.UpdatedReplicas == want &&
			d.Status.ReadyReplicas == want && ds.Status.ObservedGeneration == ds.Generation &&
			ds.Status.UpdatedNumberScheduled == nodeCount && ds.Status.NumberReady == nodeCount
		return ok, fmt.Sprintf("controller %d/%d updated, %d ready; speakers %d updated, %d ready", d.Status.UpdatedReplicas,
			d.Status.Replicas, d.Status.ReadyReplicas, ds.Status.UpdatedNumberScheduled, ds.Status.NumberReady)
	})
}

// speakerOn is the speaker pod on node.
func speakerOn(e *labEnv, node string) corev1.Pod {
	var pods corev1.PodList
	if err := e.c.CP.Client.List(context.Background(), &pods, client.InNamespace("portico-system"),
		client.MatchingFields{"spec.nodeName": node}); err != nil {
		e.t.Fatal(err)
	}
	for _, p := range pods.Items {
		if strings.HasPrefix(p.Name, "portico-speaker-") {
			return p
		}
	}
	e.t.Fatalf("no speaker pod on %s", node)
	return corev1.Pod{}
}

func deleteSpeakerPod(e *labEnv, owner *cluster.Node) {
	victim := speakerOn(e, owner.Name).Name
	e.kubectl("-n", "portico-system", "delete", "pod", victim, "--wait=false")
	waitFor(e.t, victim+" gone", 2*time.Minute, func() (bool, string) {
		var p corev1.Pod
		err := e.c.CP.Client.Get(context.Background(), client.ObjectKey{Namespace: "portico-system", Name: victim}, &p)
		return err != nil, fmt.Sprint(err)
	})
}

// killSpeaker kills the owner's speaker container with SIGKILL and waits until its kubelet
// has started it again: the node, its kube-proxy and its conntrack stay, the speaker leaves
// no goodbye, so the others find it gone by failure detection. The kubelet restarts a
// container at once the first time, then after a back-off that doubles from 10 s up to
// 5 min (CrashLoopBackOff): the same pod killed again in a later run stays down longer.
func killSpeaker(e *labEnv, owner *cluster.Node) {
	pod := speakerOn(e, owner.Name)
	speaker := containerStatus(pod, "speaker")
	if err := e.c.KillContainer(owner, strings.TrimPrefix(speaker.ContainerID, "containerd://")); err != nil {
		e.t.Fatal(err)
	}
	killed := time.Now()
	var now corev1.ContainerStatus
	waitFor(e.t, pod.Name+"'s speaker restarted", 6*time.Minute, func() (bool, string) {
		now = containerStatus(speakerOn(e, owner.Name), "speaker")
		return now.RestartCount > speaker.RestartCount && now.State.Running != nil, fmt.Sprintf("%d restarts", now.RestartCount)
	})
	e.t.Logf("%s killed after %d restarts, running again %s later", pod.Name, speaker.RestartCount,
		now.State.Running.StartedAt.Sub(killed).Round(time.Second))
}

// containerStatus is the status of pod's container named name.
func containerStatus(pod corev1.Pod, name string) corev1.ContainerStatus {
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name == name {
			return s
		}
	}
	return corev1.ContainerStatus{}
}

// stopRuntime stops the owner's kubelet and containerd; its containers (its speaker) and
// kube-proxy go on. The address moves once the Node is NotReady (node-monitor-grace-period).
func stopRuntime(e *labEnv, owner *cluster.Node) {
	e.c.StopRuntime(owner)
	movedOff(e, owner, 3*time.Minute)
}

func startRuntime(e *labEnv, owner *cluster.Node) {
	if err := e.c.StartRuntime(owner); err != nil {
		e.t.Fatal(err)
	}
}

func cutLink(e *labEnv, owner *cluster.Node) {
	if err := e.c.SetLink(owner, false); err != nil {
		e.t.Fatal(err)
	}
	movedOff(e, owner, time.Minute)
}

func healLink(e *labEnv, owner *cluster.Node) {
	if err := e.c.SetLink(owner, true); err != nil {
		e.t.Fatal(err)
	}
}

// drain is `kubectl drain` as users run it. DaemonSet pods are not evicted (they tolerate the
// cordon), so the owner's speaker runs on and hands the address over as soon as it sees the
// cordon; the test checks it was not replaced.
func drain(e *labEnv, owner *cluster.Node) {
	speaker := speakerOn(e, owner.Name)
	e.kubectl("drain", owner.Name, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=3m")
	movedOff(e, owner, time.Minute)
	if now := speakerOn(e, owner.Name); now.UID != speaker.UID {
		e.t.Errorf("drain replaced the speaker on %s (%s, now %s)", owner.Name, speaker.Name, now.Name)
	}
}

// drainWithdrawn is `kubectl drain` of a node advertising ip over BGP: its path carries
// GRACEFUL_SHUTDOWN, which the router (routerConfig) takes out of its ECMP route at once, and
// once the speakers' --bgp-drain-grace is over, the path is withdrawn.
func drainWithdrawn(routerNS string, bird *netlab.Router, ip netip.Addr) func(e *labEnv, node *cluster.Node) {
	return func(e *labEnv, node *cluster.Node) {
		start := time.Now()
		e.kubectl("drain", node.Name, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=3m")
		waitFor(e.t, "the router's route to "+ip.String()+" without "+node.Name, 2*time.Minute, func() (bool, string) {
			via, err := netlab.Gateways(routerNS, netip.PrefixFrom(ip, 32))
			return err == nil && len(via) > 0 && !slices.Contains(via, node.IPv4.Addr()), fmt.Sprintf("via %v, %v", via, err)
		})
		e.t.Logf("the router's route left %s %s after the drain began", node.Name, time.Since(start).Round(time.Millisecond))
		hop := "BGP.next_hop: " + node.IPv4.Addr().String()
		waitFor(e.t, node.Name+"'s path to "+ip.String()+" withdrawn", 2*time.Minute, func() (bool, string) {
			out, err := bird.Birdc("show", "route", netip.PrefixFrom(ip, 32).String(), "all")
			return err == nil && !strings.Contains(out, hop), out
		})
		e.t.Logf("%s's path withdrawn %s after the drain began", node.Name, time.Since(start).Round(time.Millisecond))
	}
}

func uncordon(e *labEnv, owner *cluster.Node) { e.kubectl("uncordon", owner.Name) }

// leaderPod is the controller pod holding the leader Lease ("<pod>_<id>").
func leaderPod(e *labEnv) string {
	var l coordinationv1.Lease
	if err := e.c.CP.Client.Get(context.Background(), client.ObjectKey{Namespace: "portico-system",
		Name: "portico-controller.portico.dev"}, &l); err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	pod, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
	return pod
}

func deleteLeader(e *labEnv, _ *cluster.Node) {
	var leader string
	waitFor(e.t, "a controller leader", time.Minute, func() (bool, string) {
		leader = leaderPod(e)
		return leader != "", "no holder"
	})
	e.kubectl("-n", "portico-system", "delete", "pod", leader, "--wait=false")
	waitFor(e.t, "a new controller leader", 2*time.Minute, func() (bool, string) {
		now := leaderPod(e)
		return now != "" && now != leader, "holder " + now
	})
}

var upgrades int

// upgrade sets the image of a workload's container to a new tag of the same image (tagged on
// every node: nothing can be pulled) and waits for the rollout.
func upgrade(workload, container string) func(e *labEnv, _ *cluster.Node) {
	return func(e *labEnv, _ *cluster.Node) {
		upgrades++
		next := fmt.Sprintf("%s-up%d", testImage, upgrades)
		if err := e.c.TagImage(testImage, next); err != nil {
			e.t.Fatal(err)
		}
		e.kubectl("-n", "portico-system", "set", "image", workload, container+"="+next)
		e.kubectl("-n", "portico-system", "rollout", "status", workload, "--timeout=5m")
	}
}

func operationNamed(e *labEnv, key string) operation {
	for _, op := range operations {
		if op.key == key {
			return op
		}
	}
	e.t.Fatalf("no operation %q", key)
	return operation{}
}

// selectedOperations are those PORTICO_BENCH_CLUSTER_OPS names (comma-separated keys), or all.
func selectedOperations() []operation {
	only := os.Getenv("PORTICO_BENCH_CLUSTER_OPS")
	if only == "" {
		return operations
	}
	keys := strings.Split(only, ",")
	return slices.DeleteFunc(slices.Clone(operations), func(op operation) bool { return !slices.Contains(keys, op.key) })
}
