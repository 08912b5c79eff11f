package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/portico-lb/portico/speaker/bfd"
	"github.com/portico-lb/portico/speaker/bgp"
	"github.com/portico-lb/portico/speaker/bgpproc"
)

// bgpSubcommand is the first argument that makes the binary the speaker's BGP process.
const bgpSubcommand = "bgp-process"

// bgpCommand makes the command that runs the BGP process: this binary again, with the node's
// name, the memory limit and the speaker's logging flags (call it after flag.Parse).
func bgpCommand(node string, memoryLimitMiB int64) func() *exec.Cmd {
	args := []string{bgpSubcommand, "--node-name=" + node, fmt.Sprintf("--memory-limit-mib=%d", memoryLimitMiB)}
	flag.Visit(func(f *flag.Flag) {
		if strings.HasPrefix(f.Name, "zap-") {
			args = append(args, "--"+f.Name+"="+f.Value.String())
		}
	})
	return func() *exec.Cmd {
		cmd := exec.Command("/proc/self/exe", args...)
		cmd.Args[0] = os.Args[0]
		return cmd
	}
}

// runBGPProcess is the BGP process (bgpproc.Serve) on file descriptor 3.
func runBGPProcess(args []string) error {
	fs := flag.NewFlagSet(bgpSubcommand, flag.ContinueOnError)
	node := fs.String("node-name", "", "this node's name, for the logs")
	limitMiB := fs.Int64("memory-limit-mib", 0, "the speaker kills this process above this anonymous resident memory; the Go runtime is kept below three quarters of it")
	logOpts := zap.Options{}
	logOpts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	logf.SetLogger(zap.New(zap.UseFlagOptions(&logOpts)))
	log := logf.Log.WithName("speaker").WithValues("node", *node)
	// The speaker alone decides when this process ends (a SIGTERM to the process group must
	// not end it before the speaker has withdrawn the routes through it).
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	if *limitMiB > 0 {
		// The collector works harder as the heap nears the limit, so a slow rise meets the GC
		// before the speaker's kill.
		debug.SetMemoryLimit(*limitMiB << 20 * 3 / 4)
	}
	// A memory squeeze in the container should take this process, which the speaker restarts,
	// rather than the speaker, whose ARP/NDP answers every address of this node depends on.
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0); err != nil {
		log.Info("could not raise this process's OOM score", "error", err.Error())
	}
	f := os.NewFile(3, "speaker")
	conn, err := net.FileConn(f)
	if err != nil {
		return fmt.Errorf("the channel to the speaker (file descriptor 3): %w", err)
	}
	f.Close()
	sessions := &bgp.Sessions{Log: log.WithName("bgp"), BFD: bfd.NewManager(log.WithName("bfd"))}
	reg := prometheus.NewRegistry()
	reg.MustRegister(sessions, sessions.BFD,
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{Namespace: "portico_bgp"}))
	return bgpproc.Serve(conn, sessions, reg)
}
