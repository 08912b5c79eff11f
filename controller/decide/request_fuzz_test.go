package decide

import (
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	porticov1 "github.com/portico-lb/portico/api/v1alpha1"
)

// FuzzBuildRequest: no annotation value makes buildRequest panic. A request it accepts holds
// at most one address per family, each one written in the annotation; one it refuses is an
// *annotationError naming the annotation, and still names the Service so it keeps its address.
func FuzzBuildRequest(f *testing.F) {
	for _, s := range []struct{ ips, pool, key string }{
		{"198.51.100.7", "", ""},
		{"198.51.100.7,2001:db8::7", "home-lab", "dns"},
		{" 198.51.100.7 , 2001:db8::7 ", "", ""},
		{"198.51.100.7,198.51.100.8", "", ""},
		{"fe80::1%eth0", "", ""},
		{"::ffff:198.51.100.7", "x", ""},
		{"", "", "k"},
		{",", "", ""},
		{"10.0.0.300", "", ""},
	} {
		f.Add(s.ips, s.pool, s.key, false)
	}
	f.Fuzz(func(t *testing.T, ips, pool, key string, metallb bool) {
		ipsName, poolName := porticov1.AnnotationLoadBalancerIPs, porticov1.AnnotationAddressPool
		if metallb {
			ipsName, poolName = porticov1.MetalLBLoadBalancerIPs[0], porticov1.MetalLBAddressPool[1]
		}
		svc := &corev1.Service{}
		svc.Namespace, svc.Name = "default", "fuzz"
		svc.Annotations = map[string]string{ipsName: ips, poolName: pool, porticov1.AnnotationAllowSharedIP: key}
		svc.Spec.Ports = []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}
		req, err := buildRequest(svc, nil)
		if req.Service != "default/fuzz" || len(req.Ports) != 1 {
			t.Fatalf("request lost the Service: %+v", req)
		}
		if err != nil {
			var ae *annotationError
			if !errors.As(err, &ae) {
				t.Fatalf("error %v is not an annotationError", err)
			}
			if !strings.Contains(err.Error(), ipsName) && !strings.Contains(err.Error(), poolName) {
				t.Fatalf("error %q names neither annotation", err)
			}
			return
		}
		named := strings.Split(pool, ",") // one pool or two, each trimmed
		for i := range named {
			named[i] = strings.TrimSpace(named[i])
		}
		if pool == "" || !slices.Equal(req.Pools, named) || len(req.Pools) > 2 || req.SharingKey != key {
			t.Fatalf("pool %q key %q became %+v", pool, key, req)
		}
		if len(req.IPs) == 0 || len(req.IPs) > 2 || len(req.Families) != len(req.IPs) {
			t.Fatalf("%q became %v (families %v)", ips, req.IPs, req.Families)
		}
		if len(req.IPs) == 2 && req.IPs[0].Is4() == req.IPs[1].Is4() {
			t.Fatalf("%q gave two addresses of one family: %v", ips, req.IPs)
		}
		for _, ip := range req.IPs {
			if !ip.IsValid() || ip.Zone() != "" || ip.Is4In6() {
				t.Fatalf("%q gave %v", ips, ip)
			}
		}
	})
}
