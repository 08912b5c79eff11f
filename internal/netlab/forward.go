package netlab

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// Forward accepts connections on addr inside namespace ns and relays each to target, dialled
// from the caller's (the host's) namespace: a way into the host's loopback that configures
// nothing there. The listener closes at cleanup.
func Forward(t T, ns, addr, target string) error {
	var l net.Listener
	if err := In(ns, func() (err error) { l, err = net.Listen("tcp", addr); return err }); err != nil {
		return err
	}
	t.Cleanup(func() { _ = l.Close() })
	serve(l, func(c net.Conn) {
		up, err := net.Dial("tcp", target)
		if err != nil {
			return
		}
		relay(c, up, c)
	})
	return nil
}

// ConnectProxy accepts HTTP CONNECT requests on the Unix socket at path, in the caller's (the
// host's) namespace, and dials each requested host:port from inside namespace ns: the way
// out of the host into a lab that configures nothing there, for a kube-apiserver's egress
// selector (HTTPConnect over UDS), which then reaches kubelets and pods on the lab's
// networks. The listener closes at cleanup.
func ConnectProxy(t T, ns, path string) error {
	l, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	t.Cleanup(func() { _ = l.Close() })
	serve(l, func(c net.Conn) {
		r := bufio.NewReader(c)
		req, err := http.ReadRequest(r)
		if err != nil {
			return
		}
		if req.Method != http.MethodConnect {
			fmt.Fprintf(c, "HTTP/1.1 405 Method Not Allowed\r\n\r\nonly CONNECT is served here\n")
			return
		}
		var up net.Conn
		if err := In(ns, func() (err error) { up, err = net.DialTimeout("tcp", req.URL.Host, 10*time.Second); return err }); err != nil {
			fmt.Fprintf(c, "HTTP/1.1 502 Bad Gateway\r\n\r\n%v\n", err)
			return
		}
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			up.Close()
			return
		}
		// What the client sent after its request is in r's buffer.
		relay(c, up, r)
	})
	return nil
}

// serve handles each connection l accepts in a goroutine of its own, and closes it after.
func serve(l net.Listener, handle func(net.Conn)) {
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
}

// relay copies from (what c sent) to up and up's answers to c until both are done, then closes
// up.
func relay(c, up net.Conn, from io.Reader) {
	defer up.Close()
	go func() { _, _ = io.Copy(up, from); _ = up.(*net.TCPConn).CloseWrite() }()
	_, _ = io.Copy(c, up)
}
