package netlab

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// TestConnectProxy: a CONNECT through the proxy's Unix socket reaches a server that listens
// only inside the lab's namespace, and the tunnel carries a request and its answer; a request
// that is not CONNECT gets 405, and a target nothing listens on 502 with the dial's error.
func TestConnectProxy(t *testing.T) {
	Require(t)
	l := New(t)
	h := l.AddHost("proxied", "02:00:00:00:00:41", "198.51.100.41/24", "2001:db8::41/64")
	stop, err := ServePod(h.NS, "pod", 8080)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	socket := filepath.Join(t.TempDir(), "egress.sock")
	if err := ConnectProxy(t, h.NS, socket); err != nil {
		t.Fatal(err)
	}
	ask := func(request string) (*http.Response, *bufio.Reader, net.Conn) {
		t.Helper()
		c, err := net.Dial("unix", socket)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, request); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(c)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatalf("%q: %v", request, err)
		}
		return resp, r, c
	}

	resp, r, c := ask("CONNECT 198.51.100.41:8080 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT to the pod: %s", resp.Status)
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: pod\r\nConnection: close\r\n\r\n")
	answer, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(answer.Body)
	if !strings.HasPrefix(string(body), "pod 198.51.100.41:") {
		t.Errorf("GET through the tunnel: %q, want the pod's answer to a client at 198.51.100.41", body)
	}

	for _, tc := range []struct {
		request string
		status  int
		says    string
	}{
		{"GET http://198.51.100.41:8080/ HTTP/1.1\r\nHost: 198.51.100.41:8080\r\n\r\n", http.StatusMethodNotAllowed, "only CONNECT"},
		{"CONNECT 198.51.100.41:8081 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", http.StatusBadGateway, "connection refused"},
	} {
		resp, _, _ := ask(tc.request)
		said, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != tc.status || !strings.Contains(string(said), tc.says) {
			t.Errorf("%q: %s %q, want %d saying %q", tc.request, resp.Status, said, tc.status, tc.says)
		}
	}
}
