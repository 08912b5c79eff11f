// Command echo is the tiny HTTP server the home-lab apps of `make cluster` run: it answers
// every request with "<pod name> <client address>", so a caller sees which pod it reached and
// whether its source address survived the way there.
//
// It stops the way a well-behaved app in a Service does: on SIGTERM it goes on answering for
// -drain while kube-proxy takes the pod out of the Service's rules (until then new connections
// still reach it), then closes its idle keep-alive connections and waits for the busy ones.
// An app that exits at once leaves connections kube-proxy sends it in that window unanswered,
// and their conntrack entries (SYN_SENT, two minutes) catch later connections from the same
// client port: failures no load balancer could prevent, which would blur what the cluster
// bench measures.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	addr := flag.String("listen", ":8080", "address to serve HTTP on")
	drain := flag.Duration("drain", 5*time.Second, "how long to go on answering after SIGTERM")
	flag.Parse()
	name, err := os.Hostname() // a pod's hostname is its name
	if err != nil {
		log.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s\n", name, r.RemoteAddr)
	})
	s := &http.Server{Addr: *addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
	served := make(chan error, 1)
	go func() { served <- s.ListenAndServe() }()
	select {
	case err := <-served:
		log.Fatal(err)
	case <-stop:
	}
	time.Sleep(*drain) // answering on: kube-proxy is taking the pod out of its rules
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}
