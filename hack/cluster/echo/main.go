// Command echo is the tiny HTTP server the home-lab apps of `make cluster` run: it answers
// every request with "<pod name> <client address>", so a caller sees which pod it reached and
// whether its source address survived the way there.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"time"
)

func main() {
	addr := flag.String("listen", ":8080", "address to serve HTTP on")
	flag.Parse()
	name, err := os.Hostname() // a pod's hostname is its name
	if err != nil {
		log.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s\n", name, r.RemoteAddr)
	})
	s := &http.Server{Addr: *addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	log.Fatal(s.ListenAndServe())
}
