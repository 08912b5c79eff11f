package netlab

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
)

// Prometheus is a Prometheus server (Debian's prometheus) a test started in the network
// namespace it runs in, on loopback, with its storage in the test's temporary directory.
type Prometheus struct {
	API promv1.API
	URL string
	dir string
}

// StartPrometheus writes the configuration config makes, given the address the server listens
// on (so that it can scrape itself: its own series say when it evaluated late or missed a
// scrape), and the rules files (name → content, named by the configuration's rule_files), and
// runs prometheus with them until the test ends; it returns once the server is ready.
func StartPrometheus(t TB, config func(self string) string, rules map[string]string) *Prometheus {
	t.Helper()
	dir := t.TempDir()
	for name, content := range rules {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatalf("prometheus: %v", err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("prometheus: %v", err)
	}
	addr := l.Addr().String()
	l.Close()
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(config(addr)), 0o644); err != nil {
		t.Fatalf("prometheus: %v", err)
	}
	log, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatalf("prometheus: %v", err)
	}
	cmd := exec.Command("prometheus", "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("prometheus: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		log.Close()
	})
	p := &Prometheus{URL: "http://" + addr, dir: dir}
	c, err := api.NewClient(api.Config{Address: p.URL})
	if err != nil {
		t.Fatalf("prometheus: %v", err)
	}
	p.API = promv1.NewAPI(c)
	WaitFor(t, "prometheus ready at "+addr, 30*time.Second, func() bool {
		select {
		case <-done:
			t.Fatalf("prometheus exited:\n%s", p.Log())
		default:
		}
		resp, err := http.Get(p.URL + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

// Log is what the server has logged.
func (p *Prometheus) Log() string {
	b, _ := os.ReadFile(filepath.Join(p.dir, "prometheus.log"))
	return string(b)
}

// Alerts are the server's active alerts by name: "pending" or "firing" (firing wins when an
// alert has both).
func (p *Prometheus) Alerts(ctx context.Context) (map[string]string, error) {
	res, err := p.API.Alerts(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, a := range res.Alerts {
		name := string(a.Labels["alertname"])
		if out[name] != string(promv1.AlertStateFiring) {
			out[name] = string(a.State)
		}
	}
	return out, nil
}

// Targets says which scrape targets are not up, with their last error; "" when all are. Before
// Prometheus has read its scrape configuration it lists no target at all, which is not "all
// up": it says so.
func (p *Prometheus) Targets(ctx context.Context) (string, error) {
	res, err := p.API.Targets(ctx)
	if err != nil {
		return "", err
	}
	if len(res.Active) == 0 {
		return "no target discovered yet", nil
	}
	var down []string
	for _, tg := range res.Active {
		if tg.Health != promv1.HealthGood {
			down = append(down, fmt.Sprintf("%s (%s): %s", tg.ScrapeURL, tg.Health, tg.LastError))
		}
	}
	return strings.Join(down, "; "), nil
}
