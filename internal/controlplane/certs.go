package controlplane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"
)

// KubernetesServiceIP is the ClusterIP of the `kubernetes` Service in ServiceCIDR, the address
// pods reach the apiserver at.
var KubernetesServiceIP = netip.MustParseAddr("10.96.0.1")

// WriteServingCerts writes what envtest would generate into certDir (apiserver.crt/.key and
// the service-account signer sa-signer.crt/.key; envtest keeps files it finds), but with a
// serving certificate that pods can verify: it names the `kubernetes` Service's ClusterIP and
// DNS names and the given addresses besides localhost. It returns the CA's PEM.
func WriteServingCerts(certDir string, addrs []netip.Addr) ([]byte, error) {
	caKey, caCert, caPEM, err := newCA("portico-controlplane-ca")
	if err != nil {
		return nil, err
	}
	ips := []net.IP{net.IPv4(127, 0, 0, 1), KubernetesServiceIP.AsSlice()}
	for _, a := range addrs {
		ips = append(ips, a.AsSlice())
	}
	tmpl := certTemplate("kube-apiserver")
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	tmpl.IPAddresses = ips
	tmpl.DNSNames = []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
		"kubernetes.default.svc.cluster.local"}
	cert, key, err := issue(tmpl, caCert, caKey)
	if err != nil {
		return nil, err
	}
	// The service-account signer: a key pair of its own, its certificate self-signed.
	saKey, _, saPEM, err := newCA("portico-service-accounts")
	if err != nil {
		return nil, err
	}
	return caPEM, writeFiles(certDir, map[string][]byte{
		"apiserver.crt": cert,
		"apiserver.key": key,
		"sa-signer.crt": saPEM,
		"sa-signer.key": keyPEM(saKey),
		"ca.crt":        caPEM,
	})
}

// writeKubeletClientCerts writes into certDir the certificate the apiserver presents to
// kubelets (kubelet-client.crt/.key) and the CA that signed it (kubelet-client-ca.crt), which
// the kubelets trust (their authentication.x509.clientCAFile). It returns the CA's path.
func writeKubeletClientCerts(certDir string) (string, error) {
	caKey, caCert, caPEM, err := newCA("portico-kubelet-client-ca")
	if err != nil {
		return "", err
	}
	tmpl := certTemplate("kube-apiserver-kubelet-client")
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	cert, key, err := issue(tmpl, caCert, caKey)
	if err != nil {
		return "", err
	}
	return filepath.Join(certDir, "kubelet-client-ca.crt"), writeFiles(certDir, map[string][]byte{
		"kubelet-client.crt":    cert,
		"kubelet-client.key":    key,
		"kubelet-client-ca.crt": caPEM,
	})
}

// issue signs a new key's certificate from tmpl with the CA's key; it returns both as PEM.
func issue(tmpl, caCert *x509.Certificate, caKey *ecdsa.PrivateKey) (cert, key []byte, err error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM(k), nil
}

// writeFiles writes each file into dir, readable by its owner only.
func writeFiles(dir string, files map[string][]byte) error {
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func certTemplate(cn string) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	now := time.Now()
	return &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(7 * 24 * time.Hour)}
}

func newCA(cn string) (*ecdsa.PrivateKey, *x509.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := certTemplate(cn)
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return key, cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), err
}

func keyPEM(key *ecdsa.PrivateKey) []byte {
	der, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}
