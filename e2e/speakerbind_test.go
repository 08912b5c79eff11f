package e2e

import (
	"errors"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"
)

// TestSpeakerEndpointsBindToTheNode: the speaker runs on the host's network, so its metrics and
// probe ports given as a port alone (the manifests' :7474 and :7475) listen on the node's
// address only, where the kubelet probes and Prometheus scrapes (a host-network pod's IP is
// its node's), not on the node's other addresses. Each node's IPv6 address stands for those:
// a connection there is refused (the address is up, nothing listens).
func TestSpeakerEndpointsBindToTheNode(t *testing.T) {
	inLab(t, func(t *testing.T, e *l2Env) {
		e.restartSpeakers([]string{"--metrics-bind-address=:7474", "--health-probe-bind-address=:7475"})
		for _, n := range e.Nodes {
			node := n.IPv4.Addr().String()
			// Each endpoint is waited for: right after a restart, on a loaded machine, one GET can
			// miss its timeout while the speaker is still starting.
			for _, url := range []string{"http://" + net.JoinHostPort(node, "7475") + "/healthz",
				"http://" + net.JoinHostPort(node, "7474") + "/metrics"} {
				waitFor(t, n.Name+" answers "+url+" with 200", 30*time.Second, func() bool {
					code, _ := httpStatus(url)
					return code == http.StatusOK
				})
			}
			for _, port := range []string{"7474", "7475"} {
				other := net.JoinHostPort(n.IPv6.Addr().String(), port)
				c, err := net.DialTimeout("tcp", other, 2*time.Second)
				if err == nil {
					c.Close()
					t.Errorf("%s's speaker listens on %s, another of the node's addresses", n.Name, other)
				} else if !errors.Is(err, syscall.ECONNREFUSED) {
					t.Errorf("dialling %s: %v; want the connection refused (the test cannot tell otherwise)", other, err)
				}
			}
		}
	})
}
