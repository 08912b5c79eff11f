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
			waitFor(t, n.Name+"'s probes answer on its address", 30*time.Second, func() bool {
				code, _ := httpStatus("http://" + net.JoinHostPort(node, "7475") + "/healthz")
				return code == http.StatusOK
			})
			if code, _ := httpStatus("http://" + net.JoinHostPort(node, "7474") + "/metrics"); code != http.StatusOK {
				t.Errorf("%s's metrics on its address: status %d", n.Name, code)
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
