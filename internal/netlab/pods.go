package netlab

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"time"
)

// AddPodNetwork turns a host into a node with a pod network: IPv4 forwarding on, and a bridge
// cni0 holding the first address of cidr, the pods' gateway (what a bridge CNI plugin does).
func (l *Lab) AddPodNetwork(node Host, cidr netip.Prefix) {
	l.t.Helper()
	l.MustRun("ip", "netns", "exec", node.NS, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	l.MustRun("ip", "-n", node.NS, "link", "add", "cni0", "type", "bridge")
	l.MustRun("ip", "-n", node.NS, "addr", "add", netip.PrefixFrom(cidr.Addr().Next(), cidr.Bits()).String(), "dev", "cni0")
	l.MustRun("ip", "-n", node.NS, "link", "set", "cni0", "up")
}

// AddPod creates namespace role as a pod behind node: eth0 with ip (in cidr, the node's pod
// network) on a veth whose other end is a port of the node's cni0 in hairpin mode (as the
// bridge CNI plugin's hairpinMode sets it: a pod reaching a Service whose backend is itself
// gets its own packets back through the port they came in by), default route via cni0.
// It returns the pod's namespace.
func (l *Lab) AddPod(node Host, cidr netip.Prefix, role string, ip netip.Addr) string {
	l.t.Helper()
	ns := l.AddNamespace(role)
	port := "veth-" + role
	if len(port) > 15 {
		port = port[:15]
	}
	l.MustRun("ip", "-n", node.NS, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
	l.MustRun("ip", "-n", node.NS, "link", "set", port, "master", "cni0", "up")
	l.MustRun("ip", "-n", node.NS, "link", "set", port, "type", "bridge_slave", "hairpin", "on")
	l.MustRun("ip", "-n", ns, "addr", "add", netip.PrefixFrom(ip, cidr.Bits()).String(), "dev", "eth0")
	l.MustRun("ip", "-n", ns, "link", "set", "eth0", "up")
	l.MustRun("ip", "-n", ns, "route", "add", "default", "via", cidr.Addr().Next().String())
	return ns
}

// RoutePods makes every node route every other node's pod CIDR to that node over the LAN: a
// flat pod network without encapsulation.
func (l *Lab) RoutePods(nodes []Host, cidrs []netip.Prefix) {
	l.t.Helper()
	for i, n := range nodes {
		for j, m := range nodes {
			if i != j {
				l.MustRun("ip", "-n", n.NS, "route", "add", cidrs[j].String(), "via", m.IPv4.Addr().String())
			}
		}
	}
}

// ServePod answers HTTP on each port inside namespace ns, as a pod's web server would, with
// "<name> <client address>\n": a caller sees which pod it reached and whether its source
// address survived the way there. The listeners are opened inside ns and served from ordinary
// goroutines; close stops them.
func ServePod(ns, name string, ports ...int) (close func(), err error) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s\n", name, r.RemoteAddr)
	})
	var servers []*http.Server
	close = func() {
		for _, s := range servers {
			_ = s.Close()
		}
	}
	for _, port := range ports {
		var l net.Listener
		if err := In(ns, func() (err error) {
			l, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
			return err
		}); err != nil {
			close()
			return nil, fmt.Errorf("pod %s: %w", name, err)
		}
		s := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		servers = append(servers, s)
		go func() { _ = s.Serve(l) }()
	}
	return close, nil
}

// HTTPClient makes requests from namespace ns: every connection is dialled on a thread inside
// it, and none is reused, so every request is a fresh flow through the data plane, as a
// browser opening a page would be.
func HTTPClient(ns string, timeout time.Duration) *http.Client {
	dial := func(ctx context.Context, network, addr string) (conn net.Conn, err error) {
		err = In(ns, func() error {
			conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return conn, err
	}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
}

// ServeEcho answers every line it reads with the same line, on port inside namespace ns, as a
// long-lived stream's backend (a database, a websocket) would keep its connections open; after
// echoing "bye" it closes the connection first, as an HTTP server answering "Connection: close"
// does. close stops listening.
func ServeEcho(ns string, port int) (close func() error, err error) {
	var l net.Listener
	if err := In(ns, func() (err error) {
		l, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
		return err
	}); err != nil {
		return nil, err
	}
	serve(l, func(c net.Conn) {
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				return
			}
			if _, err := c.Write(line); err != nil || string(line) == "bye\n" {
				return
			}
		}
	})
	return l.Close, nil
}

// ServeUDPEcho answers every datagram it reads on port inside namespace ns with "<name> " and
// the datagram, to the address it came from, as a DNS server answers a query: a caller sees
// which pod answered. close stops it.
func ServeUDPEcho(ns, name string, port int) (close func() error, err error) {
	var c net.PacketConn
	if err := In(ns, func() (err error) {
		c, err = net.ListenPacket("udp", fmt.Sprintf(":%d", port))
		return err
	}); err != nil {
		return nil, fmt.Errorf("pod %s: %w", name, err)
	}
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = c.WriteTo(append([]byte(name+" "), buf[:n]...), from)
		}
	}()
	return c.Close, nil
}
