package cluster_test

import (
	"bufio"
	"context"
	"net/http"
	"regexp"
	"strings"
	"time"
)

// debugsLikeAUser runs the first three tools anyone reaches for when something is wrong, each
// of which the apiserver serves by calling the pod's kubelet: `kubectl logs` of a speaker shows
// its start line, `kubectl exec` runs a binary of the speaker's image in its pod, and
// `kubectl port-forward` to gitea's pod answers on the host's loopback.
func debugsLikeAUser(e *labEnv) {
	e.t.Helper()
	// Each tool's failure is reported and the next one still tried.
	kubectl := func(args ...string) string {
		out, err := e.tryKubectl(args...)
		if err != nil {
			e.t.Error(err)
		}
		return out
	}
	logs := kubectl("-n", "portico-system", "logs", "daemonset/portico-speaker")
	if !strings.Contains(logs, "starting") || !strings.Contains(logs, "memberlist") {
		e.t.Errorf("kubectl logs of a speaker shows no start line:\n%s", logs)
	}
	if out := kubectl("-n", "portico-system", "exec", "daemonset/portico-speaker", "--", "/portico-speaker", "-help"); !strings.Contains(out, "-node-name") {
		e.t.Errorf("kubectl exec of /portico-speaker -help in a speaker's pod printed:\n%s", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pf := e.c.CP.KubectlCommand(ctx, "port-forward", "deployment/gitea", "--address", "127.0.0.1", "0:8080")
	stdout, err := pf.StdoutPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	var stderr strings.Builder
	pf.Stderr = &stderr
	if err := pf.Start(); err != nil {
		e.t.Fatal(err)
	}
	defer func() { cancel(); _ = pf.Wait() }()
	// "Forwarding from 127.0.0.1:<port> -> 8080" once it listens; EOF when it exits.
	forwarding := regexp.MustCompile(`^Forwarding from (127\.0\.0\.1:\d+) -> 8080`)
	local := ""
	for lines := bufio.NewScanner(stdout); local == "" && lines.Scan(); {
		if m := forwarding.FindStringSubmatch(lines.Text()); m != nil {
			local = m[1]
		}
	}
	if local == "" {
		e.t.Errorf("kubectl port-forward deployment/gitea 0:8080 never listened: %s", stderr.String())
		return
	}
	body, err := httpGet(&http.Client{Timeout: 10 * time.Second}, "http://"+local+"/")
	if err != nil || !strings.HasPrefix(body, "gitea-") {
		e.t.Errorf("GET http://%s/ through kubectl port-forward to gitea: %q, %v (kubectl: %s)", local, body, err, stderr.String())
	}
}
