// Package explain is `kubectl portico explain svc/NAME`: the whole chain behind one
// LoadBalancer Service (pool, address, EndpointSlices, announcing node, self-check), ending
// with one verdict line that names the first broken layer.
package explain

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/plugin"
	"github.com/portico-lb/portico/rules"
)

// Command is the explain subcommand.
func Command(env func(*cobra.Command) (*plugin.Env, error)) *cobra.Command {
	return &cobra.Command{
		Use:     "explain svc/NAME [-n NAMESPACE]",
		Short:   "Walk one Service's chain (pool, IP, endpoints, announcer, self-check) and name the broken layer",
		Example: "  kubectl portico explain svc/gitea -n default",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := serviceName(args[0])
			if err != nil {
				return err
			}
			e, err := env(cmd)
			if err != nil {
				return err
			}
			return Run(cmd.Context(), e, name)
		},
	}
}

// serviceName accepts NAME, svc/NAME, service/NAME and services/NAME.
func serviceName(arg string) (string, error) {
	kind, name, found := strings.Cut(arg, "/")
	if !found {
		return arg, nil
	}
	switch kind {
	case "svc", "service", "services":
		return name, nil
	}
	return "", fmt.Errorf("explain takes a Service (svc/NAME), not %q", kind)
}

// layer is one step of the chain and whether it holds.
type layer struct {
	name   string
	lines  []string
	broken string // why the layer is broken; "" when it works
}

// Run prints the chain for Service name in e.Namespace.
func Run(ctx context.Context, e *plugin.Env, name string) error {
	var svc corev1.Service
	if err := e.Client.Get(ctx, client.ObjectKey{Namespace: e.Namespace, Name: name}, &svc); err != nil {
		return err
	}
	fmt.Fprintf(e.Out, "Service %s/%s: %s\n", svc.Namespace, svc.Name, describeSpec(&svc))
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		fmt.Fprintf(e.Out, "verdict: not a LoadBalancer Service (type %s): Portico does not handle it\n", svc.Spec.Type)
		return nil
	}
	var speakers porticov1.SpeakerList
	if err := e.Client.List(ctx, &speakers); err != nil {
		return err
	}
	address, err := addressLayer(ctx, e.Client, &svc)
	if err != nil {
		return err
	}
	endpoints, err := endpointsLayer(ctx, e.Client, &svc)
	if err != nil {
		return err
	}
	live, liveNote := liveSpeakers(ctx, e.Client, speakers.Items, time.Now())
	liveItems := slices.DeleteFunc(slices.Clone(speakers.Items), func(s porticov1.Speaker) bool { return !live(s.Name) })
	elected, err := electedLines(ctx, e.Client, &svc, live, rules.IgnoreExcludeLabel(liveItems), rules.SubnetsOf(liveItems), rules.HoldersOf(liveItems))
	if err != nil {
		elected = []string{"who answers not computed: " + err.Error()}
	}
	announcer := announcerLayer(&svc, liveItems)
	announcer.lines = append(announcer.lines, elected...)
	if liveNote != "" {
		announcer.lines = append(announcer.lines, liveNote)
	}
	layers := []layer{address, endpoints, announcer, selfCheckLayer(&svc, speakers.Items)}
	for _, l := range layers {
		for i, line := range l.lines {
			label := ""
			if i == 0 {
				label = l.name
			}
			fmt.Fprintf(e.Out, "  %-11s %s\n", label, line)
		}
	}
	writeVerdict(e.Out, layers)
	return nil
}

func writeVerdict(out io.Writer, layers []layer) {
	for _, l := range layers {
		if l.broken != "" {
			fmt.Fprintf(out, "verdict: BROKEN at %s: %s\n", l.name, l.broken)
			return
		}
	}
	fmt.Fprintln(out, "verdict: OK: the address is held, backed by ready endpoints and announced")
}

func describeSpec(svc *corev1.Service) string {
	parts := []string{string(svc.Spec.Type)}
	if len(svc.Spec.Selector) > 0 {
		parts = append(parts, "selector "+labels.FormatLabels(svc.Spec.Selector))
	} else {
		parts = append(parts, "no selector")
	}
	var ports []string
	for _, p := range svc.Spec.Ports {
		ports = append(ports, fmt.Sprintf("%d/%s→%s", p.Port, orTCP(p.Protocol), p.TargetPort.String()))
	}
	if len(ports) > 0 {
		parts = append(parts, "ports "+strings.Join(ports, ","))
	}
	if svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		parts = append(parts, "externalTrafficPolicy Local")
	}
	return strings.Join(parts, ", ")
}

func orTCP(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}

func condLine(c *metav1.Condition) string {
	return fmt.Sprintf("%s=%s %s: %s", strings.TrimPrefix(c.Type, "portico.dev/"), c.Status, c.Reason, c.Message)
}

// addressLayer: the pool and the address, from the IPAllocated condition and the pool.
func addressLayer(ctx context.Context, c client.Client, svc *corev1.Service) (layer, error) {
	l := layer{name: "address"}
	cond := meta.FindStatusCondition(svc.Status.Conditions, porticov1.ConditionIPAllocated)
	var ips []string
	for _, in := range svc.Status.LoadBalancer.Ingress {
		ips = append(ips, in.IP)
	}
	// One pool, or two when a dual-stack Service took each family from another.
	for _, poolName := range porticov1.AllocatedFromPools(svc) {
		var pool porticov1.IPAddressPool
		switch found, err := get(ctx, c, client.ObjectKey{Name: poolName}, &pool); {
		case err != nil:
			return l, err
		case found:
			var addrs []string
			for _, a := range pool.Spec.Addresses {
				addrs = append(addrs, string(a))
			}
			l.lines = append(l.lines, fmt.Sprintf("pool %s (%s): %d assigned, %s available, %d waiting",
				pool.Name, strings.Join(addrs, ","), pool.Status.Assigned, pool.Status.Available, pool.Status.Waiting))
		default:
			l.lines = append(l.lines, fmt.Sprintf("pool %s no longer exists", poolName))
		}
	}
	if len(ips) > 0 {
		l.lines = append(l.lines, "IP "+strings.Join(ips, ", "))
	}
	switch {
	case cond == nil && len(ips) == 0:
		l.lines = append(l.lines, "no address and no IPAllocated condition: is portico-controller running, and is the Service's loadBalancerClass Portico's?")
		l.broken = "no address assigned, and Portico has not reported on the Service"
	case cond == nil:
		l.lines = append(l.lines, "no IPAllocated condition: the address was not written by Portico")
	default:
		l.lines = append(l.lines, condLine(cond))
		if len(ips) == 0 {
			l.broken = cond.Reason + ": " + cond.Message
		}
	}
	return l, nil
}

// endpointsLayer: the Service's EndpointSlices (by the kubernetes.io/service-name label) and
// the EndpointsReady condition.
func endpointsLayer(ctx context.Context, c client.Client, svc *corev1.Service) (layer, error) {
	l := layer{name: "endpoints"}
	var list discoveryv1.EndpointSliceList
	if err := c.List(ctx, &list, client.InNamespace(svc.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name}); err != nil {
		return l, err
	}
	slices.SortFunc(list.Items, func(a, b discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	ready := 0
	for _, s := range list.Items {
		l.lines = append(l.lines, fmt.Sprintf("EndpointSlice %s (%s): %s", s.Name, s.AddressType, plural(len(s.Endpoints), "endpoint")))
		for _, ep := range s.Endpoints {
			state := "not ready"
			if rules.ReadyEndpoint(&ep) {
				state = "ready"
				ready++
			} else if ep.Conditions.Terminating != nil && *ep.Conditions.Terminating {
				state = "terminating"
			}
			where := ""
			if ep.NodeName != nil {
				where = " on " + *ep.NodeName
			}
			target := ""
			if ep.TargetRef != nil {
				target = " " + strings.ToLower(ep.TargetRef.Kind) + "/" + ep.TargetRef.Name
			}
			l.lines = append(l.lines, fmt.Sprintf("  %s%s%s %s", strings.Join(ep.Addresses, ","), target, where, state))
		}
	}
	if len(list.Items) == 0 {
		l.lines = append(l.lines, fmt.Sprintf("no EndpointSlice labelled %s=%s", discoveryv1.LabelServiceName, svc.Name))
	}
	cond := meta.FindStatusCondition(svc.Status.Conditions, porticov1.ConditionEndpointsReady)
	switch {
	case cond != nil:
		l.lines = append(l.lines, condLine(cond))
		if cond.Status == metav1.ConditionFalse {
			l.broken = cond.Reason + ": " + cond.Message
		}
	case ready == 0:
		l.broken = "no ready endpoint in the Service's EndpointSlices"
	}
	return l, nil
}

// announcerLayer: who announces the address: the controller's Announced condition, or, when
// the controller has not written one, the speakers' own reports.
func announcerLayer(svc *corev1.Service, speakers []porticov1.Speaker) layer {
	l := layer{name: "announcer"}
	if cond := meta.FindStatusCondition(svc.Status.Conditions, porticov1.ConditionAnnounced); cond != nil {
		l.lines = append(l.lines, condLine(cond))
		if cond.Status != metav1.ConditionTrue && cond.Reason != porticov1.ReasonNoAddress {
			l.broken = cond.Reason + ": " + cond.Message
		}
		return l
	}
	key := svc.Namespace + "/" + svc.Name
	ips := porticov1.IngressAddrs(svc)
	if len(ips) == 0 {
		l.lines = []string{"nothing to announce without an address"}
		return l
	}
	for _, ip := range ips {
		var by []string
		for _, s := range speakers {
			for _, a := range s.Status.Announcements {
				if a.Service == key && porticov1.SameAddr(a.IP, ip) {
					by = append(by, fmt.Sprintf("%s from node %s (interfaces %s, peers %s)", a.Protocol, s.Name,
						strings.Join(a.Interfaces, ","), strings.Join(a.Peers, ",")))
				}
			}
		}
		if len(by) == 0 {
			l.lines = append(l.lines, fmt.Sprintf("%s: no speaker announces it (%d speakers report)", ip, len(speakers)))
			l.broken = fmt.Sprintf("no node announces %s", ip)
			continue
		}
		l.lines = append(l.lines, fmt.Sprintf("%s: %s", ip, strings.Join(by, "; ")))
	}
	return l
}

// selfCheckLayer: who answered the speakers' ARP/NDP probes of the address.
func selfCheckLayer(svc *corev1.Service, speakers []porticov1.Speaker) layer {
	l := layer{name: "self-check"}
	if cond := meta.FindStatusCondition(svc.Status.Conditions, porticov1.ConditionReachable); cond != nil {
		l.lines = append(l.lines, condLine(cond))
		if cond.Status == metav1.ConditionFalse {
			l.broken = cond.Reason + ": " + cond.Message
		}
		return l
	}
	for _, ip := range porticov1.IngressAddrs(svc) {
		var heard []string
		for _, s := range speakers {
			for _, sc := range s.Status.SelfChecks {
				if porticov1.SameAddr(sc.IP, ip) {
					macs := "nobody"
					if len(sc.MACs) > 0 {
						macs = strings.Join(sc.MACs, ",")
					}
					heard = append(heard, fmt.Sprintf("node %s heard %s", s.Name, macs))
				}
			}
		}
		if len(heard) == 0 {
			l.lines = append(l.lines, fmt.Sprintf("%s: not probed (no speaker reports a self-check of it)", ip))
			continue
		}
		l.lines = append(l.lines, fmt.Sprintf("%s: %s", ip, strings.Join(heard, "; ")))
	}
	if len(l.lines) == 0 {
		l.lines = []string{"nothing to probe without an address"}
	}
	return l
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func get(ctx context.Context, c client.Client, key client.ObjectKey, obj client.Object) (bool, error) {
	err := c.Get(ctx, key, obj)
	if client.IgnoreNotFound(err) != nil {
		return false, err
	}
	return err == nil, nil
}
