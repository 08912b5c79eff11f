package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/go-logr/logr"
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

// runBGPProcess is the BGP process (bgpproc.Serve): the speaker's child on file descriptor 3,
// or, with --speaker-socket, a container of its own that connects to the speaker.
func runBGPProcess(args []string) error {
	fs := flag.NewFlagSet(bgpSubcommand, flag.ContinueOnError)
	node := fs.String("node-name", os.Getenv("NODE_NAME"), "this node's name, for the logs (default $NODE_NAME)")
	limitMiB := fs.Int64("memory-limit-mib", 0, "this process's memory limit (the speaker's --bgp-memory-limit-mib, or the container's); the Go runtime is kept below three quarters of it")
	socket := fs.String("speaker-socket", "", "run on its own (the speaker pod's bgp container) and connect to the speaker at this unix socket (its --bgp-socket) rather than on file descriptor 3; after each speaker the process starts afresh (exec) for the next, unless it was told to terminate (SIGTERM)")
	logOpts := zap.Options{}
	logOpts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	logf.SetLogger(zap.New(zap.UseFlagOptions(&logOpts)))
	log := logf.Log.WithName("speaker").WithValues("node", *node)
	// The speaker alone decides when this process ends (a SIGTERM to the process group, or to
	// the pod's containers, must not end it before the speaker has withdrawn the routes through
	// it); a SIGTERM only says not to start afresh after it.
	signal.Ignore(syscall.SIGINT, syscall.SIGHUP)
	terminating := make(chan os.Signal, 1)
	signal.Notify(terminating, syscall.SIGTERM)
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
	conn, err := speakerChannel(*socket, log)
	if err != nil {
		return err
	}
	sessions := &bgp.Sessions{Log: log.WithName("bgp"), BFD: bfd.NewManager(log.WithName("bfd"))}
	reg := prometheus.NewRegistry()
	reg.MustRegister(sessions, sessions.BFD,
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{Namespace: "portico_bgp"}))
	err = bgpproc.Serve(conn, sessions, reg)
	select {
	case <-terminating:
	default:
		if *socket != "" {
			// A fresh process for the next speaker (this one's may have been stuck, or hung):
			// nothing of this one's sessions or memory stays, and the container does not restart.
			log.Info("the speaker is gone; starting afresh for the next one", "why", fmt.Sprint(err))
			return syscall.Exec("/proc/self/exe", os.Args, os.Environ())
		}
	}
	return err
}

// speakerChannel is the connection to the speaker: file descriptor 3 from the speaker that
// started this process, or the speaker's socket, once it answers.
func speakerChannel(socket string, log logr.Logger) (net.Conn, error) {
	if socket == "" {
		f := os.NewFile(3, "speaker")
		defer f.Close()
		conn, err := net.FileConn(f)
		if err != nil {
			return nil, fmt.Errorf("the channel to the speaker (file descriptor 3): %w", err)
		}
		return conn, nil
	}
	log.Info("waiting for the speaker", "socket", socket)
	conn, err := bgpproc.Dial(context.Background(), socket)
	if err != nil {
		return nil, fmt.Errorf("connecting to the speaker at %s: %w", socket, err)
	}
	return conn, nil
}
