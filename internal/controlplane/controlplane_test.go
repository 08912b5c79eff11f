package controlplane

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestMissingBinariesNameTheFix: without the binaries, tests fail with the command to run.
func TestMissingBinariesNameTheFix(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "etcd"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBEBUILDER_ASSETS", dir)
	_, err := AssetsDir("/unused")
	if err == nil {
		t.Fatal("AssetsDir accepted a directory without kube-apiserver and kubectl")
	}
	for _, want := range []string{dir, "kube-apiserver, kubectl", "run `make controlplane`"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "etcd,") {
		t.Errorf("error %q names etcd, which is present", err)
	}
}

// startForTest starts a control plane, and when the test ends stops it and checks that it
// left nothing behind.
func startForTest(t *testing.T) *ControlPlane {
	t.Helper()
	cp, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(cp.dir); !os.IsNotExist(err) {
			t.Errorf("data, certificates or kubeconfig left behind in %s: %v", cp.dir, err)
		}
	})
	return cp
}

// TestStart starts the real control plane: it reports the version it was built as, serves
// our CRDs, and allocates ClusterIPs outside the home-lab pool.
func TestStart(t *testing.T) {
	cp := startForTest(t)

	dc, err := discovery.NewDiscoveryClientForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != "v"+Version {
		t.Errorf("apiserver reports %s, want v%s", v.GitVersion, Version)
	}
	resources, err := dc.ServerResourcesForGroupVersion("portico.dev/v1alpha1")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, r := range resources.APIResources {
		if !strings.Contains(r.Name, "/") {
			kinds = append(kinds, r.Kind)
		}
	}
	slices.Sort(kinds)
	if got := strings.Join(kinds, ","); got != "BFDProfile,BGPAdvertisement,BGPPeer,IPAddressPool,L2Advertisement,Speaker" {
		t.Errorf("portico.dev/v1alpha1 serves %s", got)
	}

	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "default"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	}
	if err := cp.Client.Create(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
	ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
	if err != nil || !netip.MustParsePrefix(ServiceCIDR).Contains(ip) {
		t.Errorf("ClusterIP %q is not in %s", svc.Spec.ClusterIP, ServiceCIDR)
	}
}

// TestRestartKeepsData: after Restart the same client reaches the apiserver on the same port
// and finds what it wrote before, and writes again.
func TestRestartKeepsData(t *testing.T) {
	cp := startForTest(t)
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept", Namespace: "default"}, Data: map[string]string{"k": "v"}}
	if err := cp.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	host := cp.Config.Host
	if err := cp.Restart(); err != nil {
		t.Fatal(err)
	}
	if cp.Config.Host != host {
		t.Errorf("the apiserver moved from %s to %s", host, cp.Config.Host)
	}
	var got corev1.ConfigMap
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(cm), &got); err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	if got.Data["k"] != "v" || got.UID != cm.UID {
		t.Errorf("after the restart the ConfigMap is %+v, want uid %s with k=v", got, cm.UID)
	}
	got.Data["k"] = "w"
	if err := cp.Client.Update(ctx, &got); err != nil {
		t.Errorf("writing after the restart: %v", err)
	}
}
