package netlab

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const sigterm = syscall.SIGTERM

// frrRun is where FRR keeps an instance's sockets and pid files: /var/run/frr/<pathspace>.
// The daemons drop privileges to user frr, so the directory (and the config in it) belongs
// to frr.
const frrRun = "/var/run/frr"

// StartFRR runs FRR's zebra and bgpd in namespace ns with config (an frr.conf), as their own
// instance (-N pathspace), in the foreground as children of the test, and waits until vtysh
// answers. zebra installs bgpd's routes in the namespace's kernel table. bfdd runs too when
// config has a top-level bfd block.
func StartFRR(t TB, ns, config string) *Router {
	t.Helper()
	r := &Router{t: t, NS: ns, kind: "frr", conf: config, name: fmt.Sprintf("pt%d-%d", os.Getpid()%100000, seq.Add(1))}
	r.dir = filepath.Join(frrRun, r.name)
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(r.dir) })
	for name, data := range map[string]string{"frr.conf": config, "vtysh.conf": ""} {
		if err := os.WriteFile(filepath.Join(r.dir, name), []byte(data), 0o644); err != nil {
			t.Fatalf("%v", err)
		}
	}
	if u, err := user.Lookup("frr"); err == nil {
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		for _, p := range []string{r.dir, filepath.Join(r.dir, "frr.conf"), filepath.Join(r.dir, "vtysh.conf")} {
			_ = os.Chown(p, uid, gid)
		}
	}
	r.Start()
	t.Cleanup(r.Stop)
	return r
}

func (r *Router) startFRR() {
	conf := filepath.Join(r.dir, "frr.conf")
	daemons := []string{"zebra", "bgpd"}
	if strings.Contains(r.conf, "\nbfd\n") {
		daemons = []string{"zebra", "bfdd", "bgpd"} // bgpd asks bfdd (through zebra) for its BFD sessions
	}
	for _, d := range daemons {
		log, err := os.OpenFile(filepath.Join(r.dir, d+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			r.t.Fatalf("%v", err)
		}
		r.spawn(log, "ip", "netns", "exec", r.NS, "/usr/lib/frr/"+d, "-N", r.name, "-f", conf,
			"-i", filepath.Join(r.dir, d+".pid"), "--log", "stdout")
		// bgpd connects to zebra's socket: start it once zebra is up.
		WaitFor(r.t, d+" answers in "+r.NS, 10*time.Second, func() bool {
			_, err := r.Vtysh("show version")
			return err == nil && fileExists(filepath.Join(r.dir, d+".vty"))
		})
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// Vtysh runs one vtysh command against this FRR instance.
func (r *Router) Vtysh(command string) (string, error) {
	out, err := exec.Command("vtysh", "-N", r.name, "--config_dir", frrRun, "-c", command).CombinedOutput()
	return string(out), err
}
