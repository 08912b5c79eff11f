package controlplane

import (
	"context"
	"net/url"
	"os/exec"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// WriteKubeconfig writes an admin kubeconfig for processes that reach the apiserver at another
// address than the test's own (from a network namespace: the apiserver's bridge address, or a
// forwarded port). host replaces the host part of the apiserver URL and port its port ("" keeps
// it); the serving certificate names 127.0.0.1 only, hence tls-server-name.
func (cp *ControlPlane) WriteKubeconfig(path, host, port string) error {
	u, err := url.Parse(cp.Config.Host)
	if err != nil {
		return err
	}
	if port == "" {
		port = u.Port()
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["lab"] = &clientcmdapi.Cluster{Server: "https://" + host + ":" + port, TLSServerName: "127.0.0.1",
		CertificateAuthorityData: cp.Config.CAData}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cp.Config.CertData,
		ClientKeyData: cp.Config.KeyData, Token: cp.Config.BearerToken}
	cfg.Contexts["lab"] = &clientcmdapi.Context{Cluster: "lab", AuthInfo: "admin"}
	cfg.CurrentContext = "lab"
	return clientcmd.WriteToFile(*cfg, path)
}

// KubectlCommand is kubectl against this control plane, with a discovery cache of its own:
// an apiserver may reuse the port of an earlier one, whose discovery cached in ~/.kube/cache
// would lack Portico's kinds and make kubectl refuse them.
func (cp *ControlPlane) KubectlCommand(ctx context.Context, args ...string) *exec.Cmd {
	flags := []string{"--kubeconfig", cp.Kubeconfig, "--cache-dir", filepath.Join(cp.dir, "kube-cache")}
	return exec.CommandContext(ctx, cp.Kubectl, append(flags, args...)...)
}
