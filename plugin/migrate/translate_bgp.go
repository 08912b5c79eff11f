package migrate

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

// peer translates a MetalLB BGPPeer, field by field.
func (t *translator) peer(o *unstructured.Unstructured) {
	f := newFields(o, &t.out)
	p := &porticov1.BGPPeer{}
	if !t.peerWhere(o, f, p) {
		return
	}
	iface := p.Spec.Interface
	f.take("myASN", &p.Spec.MyASN)
	if iface != "" {
		// An unnumbered router is directly connected: the API refuses these with interface.
		f.drop("sourceAddress", "an unnumbered session runs from the interface's link-local address", "")
		f.drop("ebgpMultiHop", "an unnumbered router is directly connected", false)
	} else if src := ""; f.take("sourceAddress", &src) {
		p.Spec.SourceAddress = porticov1.IPAddress(src)
	}
	var port int32
	if f.take("peerPort", &port) && port != 0 {
		p.Spec.PeerPort = port
	}
	peerTimers(f, p)
	f.take("routerID", &p.Spec.RouterID)
	f.take("nodeSelectors", &p.Spec.NodeSelectors)
	f.take("ebgpMultiHop", &p.Spec.EBGPMultiHop)
	f.take("enableGracefulRestart", &p.Spec.EnableGracefulRestart)
	t.password(o, f, p)
	peerVRFAndBFD(f, p)
	f.drop("disableMP", everyFamily, false)
	f.drop("dualStackAddressFamily", everyFamily, false)
	f.rest()
	t.add(p, "BGPPeer")
}

// peerWhere takes the router's address or interface and its AS number (or dynamicASN), and
// the name; false when the peer cannot be translated (said in the result).
func (t *translator) peerWhere(o *unstructured.Unstructured, f *fields, p *porticov1.BGPPeer) bool {
	var addr, iface, dyn string
	f.take("peerAddress", &addr)
	f.take("interface", &iface)
	f.take("dynamicASN", &dyn)
	f.take("peerASN", &p.Spec.PeerASN)
	switch {
	case addr == "" && iface == "":
		t.whole(o, "neither spec.peerAddress nor spec.interface is set")
		return false
	case p.Spec.PeerASN == 0 && dyn == "":
		t.whole(o, "neither spec.peerASN nor spec.dynamicASN is set")
		return false
	case p.Spec.PeerASN == 0 && dyn != string(porticov1.DynamicASNInternal) && dyn != string(porticov1.DynamicASNExternal):
		t.whole(o, fmt.Sprintf("dynamicASN %q is neither internal nor external", dyn))
		return false
	}
	if p.Spec.PeerASN == 0 {
		p.Spec.DynamicASN = porticov1.DynamicASN(dyn)
	} else if dyn != "" {
		f.skip("dynamicASN", "spec.peerASN is set, and Portico takes one or the other")
	}
	if addr != "" && iface != "" {
		f.skip("interface", "spec.peerAddress is set, and Portico peers with one or the other")
		iface = ""
	}
	p.Spec.Interface = iface
	var ok bool
	if p.ObjectMeta, ok = t.meta(o, "BGPPeer"); !ok {
		return false
	}
	p.Spec.PeerAddress = porticov1.IPAddress(addr)
	return true
}

// peerTimers takes the hold, keepalive and connect times; a zero one is left to the default.
func peerTimers(f *fields, p *porticov1.BGPPeer) {
	var hold, keep, connect metav1.Duration
	if f.take("holdTime", &hold) && hold.Duration != 0 {
		p.Spec.HoldTime = &hold
	}
	if f.take("keepaliveTime", &keep) && keep.Duration != 0 {
		p.Spec.KeepaliveTime = &keep
	}
	if f.take("connectTime", &connect) && connect.Duration != 0 {
		p.Spec.ConnectTime = &connect
	}
}

// peerVRFAndBFD takes the VRF and the BFD profile, or drops them for an unnumbered peer (and
// the BFD profile in a VRF), saying why.
func peerVRFAndBFD(f *fields, p *porticov1.BGPPeer) {
	unnumbered := p.Spec.Interface != ""
	if unnumbered {
		f.drop("vrf", "Portico peers unnumbered in the node's default VRF only", "")
	} else {
		f.take("vrf", &p.Spec.VRF)
	}
	switch {
	case unnumbered:
		f.drop("bfdProfile", "Portico's BFD needs the router's address, and this peer is unnumbered: the session detects a dead peer through its holdTime", "")
	case p.Spec.VRF != "":
		f.drop("bfdProfile", "Portico's BFD does not run through a VRF yet: the session detects a dead peer through its holdTime", "")
	default:
		f.take("bfdProfile", &p.Spec.BFDProfile)
	}
}

func (t *translator) bfdProfile(o *unstructured.Unstructured) {
	f := newFields(o, &t.out)
	p := &porticov1.BFDProfile{}
	var ok bool
	if p.ObjectMeta, ok = t.meta(o, "BFDProfile"); !ok {
		return
	}
	f.take("receiveInterval", &p.Spec.ReceiveInterval)
	f.take("transmitInterval", &p.Spec.TransmitInterval)
	f.take("detectMultiplier", &p.Spec.DetectMultiplier)
	f.take("passiveMode", &p.Spec.PassiveMode)
	f.take("minimumTtl", &p.Spec.MinimumTTL)
	var echo bool
	if f.take("echoMode", &echo) && echo {
		f.skip("echoMode", "Portico's BFD has no echo mode: control packets alone detect a dead path")
	}
	f.drop("echoInterval", "Portico's BFD has no echo mode, so no echo interval")
	f.rest()
	t.add(p, "BFDProfile")
}

// password carries a passwordSecret over, pointing into Portico's namespace (the only one
// whose Secrets the speakers may read). A clear-text password is never printed.
func (t *translator) password(o *unstructured.Unstructured, f *fields, p *porticov1.BGPPeer) {
	var clear string
	if f.take("password", &clear) && clear != "" {
		f.skip("password", fmt.Sprintf("Portico reads BGP passwords only from Secrets (it is not printed here): "+
			"kubectl -n %s create secret generic %s-bgp --from-literal=password=... and set spec.passwordSecret "+
			"{namespace: %s, name: %s-bgp}", t.opts.Namespace, o.GetName(), t.opts.Namespace, o.GetName()))
	}
	var ref struct{ Name, Namespace string }
	if !f.take("passwordSecret", &ref) || ref.Name == "" {
		return
	}
	from := ref.Namespace
	if from == "" {
		from = o.GetNamespace() // MetalLB reads it from its own namespace
	}
	p.Spec.PasswordSecret = &porticov1.SecretKeyRef{Namespace: porticov1.Name(t.opts.Namespace), Name: porticov1.Name(ref.Name), Key: "password"}
	if from != t.opts.Namespace {
		t.out.Notes = append(t.out.Notes, Problem{Object: describe(o), Field: "spec.passwordSecret",
			Reason: fmt.Sprintf("copy Secret %s/%s to %s (the speakers read Secrets only there): "+
				"kubectl -n %s get secret %s -o json | jq '.metadata={name:.metadata.name,namespace:\"%s\"}' | kubectl apply -f -",
				from, ref.Name, t.opts.Namespace, from, ref.Name, t.opts.Namespace)})
	}
	t.out.Notes = append(t.out.Notes, Problem{Object: describe(o), Field: "spec.passwordSecret",
		Reason: fmt.Sprintf("let the speakers read Secret %s/%s (they get only Secrets granted to them by name; "+
			"with the chart, list it in speaker.secretNames): kubectl -n %s create role portico-speaker-bgp-secrets "+
			"--verb=get --resource=secrets --resource-name=%s, and a rolebinding of it to ServiceAccount portico-speaker "+
			"(docs/bgp-routers.md)", t.opts.Namespace, ref.Name, t.opts.Namespace, ref.Name)})
}
