package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/portico-lb/portico/speaker/controlplane/cpconfig"
)

// readyzCheck asks this node's apiserver whether it is ready: GET /readyz over TLS, verified
// against the configured CA, within the timeout.
type readyzCheck struct {
	url     string
	timeout time.Duration
	client  *http.Client
}

func newReadyzCheck(r cpconfig.Readyz) (*readyzCheck, error) {
	pem, err := os.ReadFile(r.CA)
	if err != nil {
		return nil, fmt.Errorf("readyz.ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("readyz.ca: %s holds no PEM certificate", r.CA)
	}
	// No connection is kept between checks: a killed apiserver must show at the next check as
	// a refused connection, not as a request on a connection that only later turns out dead.
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, DisableKeepAlives: true, Proxy: nil}
	return &readyzCheck{url: r.URL, timeout: time.Duration(r.Timeout), client: &http.Client{Transport: tr}}, nil
}

// check returns why the apiserver is not ready, "" when it is.
func (c *readyzCheck) check(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return err.Error()
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Sprintf("readyz %d: %s", resp.StatusCode, firstLines(string(body), 3))
	}
	return ""
}

// firstLines keeps a failing /readyz's first lines, which name the failed checks, for the log.
func firstLines(s string, n int) string {
	lines := strings.SplitN(strings.TrimSpace(s), "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "; ")
}
