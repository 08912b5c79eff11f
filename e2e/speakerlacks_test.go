package e2e

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/portico-lb/portico/api/v1alpha1"
	"github.com/portico-lb/portico/speaker/guard"
	"github.com/portico-lb/portico/speaker/handoff"
)

// TestSpeakerSaysWhatItLacks: each node's speaker is started without something its packet path
// needs, and says so in its Speaker's DataPath condition, with the reason; none of them reports
// all is well. node-a, the owner of a Service's address, has no CAP_NET_RAW: it cannot answer
// ARP, and the Service's Announced condition says that node cannot answer rather than that it
// announces the address. node-b has no CAP_NET_ADMIN: no forwarding guard, no hand-off. On
// node-c the nftables tables the guard and the hand-off make are held by another process (nft
// with an owned table), so making them fails although the speaker holds CAP_NET_ADMIN. Started
// again with everything, each says so, and the address is answered.
func TestSpeakerSaysWhatItLacks(t *testing.T) {
	inLab(t, func(t *testing.T, e *l2Env) {
		startInProcessController(t, e)
		ip := netip.MustParseAddr("198.51.100.213")
		owner := hashOwner(ip, "node-a", "node-b", "node-c")
		others := slices.DeleteFunc([]string{"node-a", "node-b", "node-c"}, func(n string) bool { return n == owner })
		noAdmin, noTables := others[0], others[1]
		full := e.Security
		e.restartWithout(owner, "NET_RAW")
		e.restartWithout(noAdmin, "NET_ADMIN")
		holdTables(t, e.node(noTables).NS, guard.TableName, handoff.TableName)
		e.kill(noTables, syscall.SIGTERM)
		e.startSpeaker(noTables)

		e.create(scenario{name: "lacks", ip: ip, byController: true})
		e.waitServiceCondition(t, "lacks", v1alpha1.ConditionAnnounced, metav1.ConditionFalse, v1alpha1.ReasonCannotAnswer,
			"node "+owner+" should answer for "+ip.String()+" but its speaker cannot: no CAP_NET_RAW")
		e.waitDataPath(t, owner, metav1.ConditionFalse, v1alpha1.ReasonNetRawMissing, "no CAP_NET_RAW")
		e.waitDataPath(t, noAdmin, metav1.ConditionFalse, v1alpha1.ReasonNetAdminMissing, "no CAP_NET_ADMIN")
		e.waitDataPath(t, noTables, metav1.ConditionFalse, v1alpha1.ReasonNftablesUnavailable, "operation not permitted")

		e.Security = full
		for _, n := range []string{owner, noAdmin} {
			e.kill(n, syscall.SIGTERM)
			e.startSpeaker(n)
			e.waitDataPath(t, n, metav1.ConditionTrue, v1alpha1.ReasonDataPathComplete, "")
		}
		// The address went to another node while node-a's speaker restarted, and stays there.
		e.waitServiceCondition(t, "lacks", v1alpha1.ConditionAnnounced, metav1.ConditionTrue, v1alpha1.ReasonAnnouncedL2, "from node")
		e.expectOwner(ip, e.soleAnnouncer(ip, 10*time.Second))
	})
}

// restartWithout restarts node's speaker with the DaemonSet's capabilities but capability.
func (e *l2Env) restartWithout(node, capability string) {
	full := e.Security
	e.kill(node, syscall.SIGTERM)
	e.Security.Capabilities = slices.DeleteFunc(slices.Clone(full.Capabilities), func(c string) bool { return c == capability })
	e.startSpeaker(node)
	e.Security = full
}

// holdTables makes the nftables tables named (family inet) in namespace ns owned by an nft
// process that runs until the test ends: the kernel refuses any other process to replace or
// delete an owned table, as it refuses a speaker whose kernel lacks what the table needs.
func holdTables(t *testing.T, ns string, names ...string) {
	cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-i")
	stdin, err := cmd.StdinPipe()
	must(t, err)
	must(t, cmd.Start())
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	for _, name := range names {
		_, err := io.WriteString(stdin, fmt.Sprintf("add table inet %s { flags owner; }\n", name))
		must(t, err)
	}
	waitFor(t, "nft holds the tables", 5*time.Second, func() bool {
		out, err := exec.Command("ip", "netns", "exec", ns, "nft", "list", "tables").CombinedOutput()
		return err == nil && !slices.ContainsFunc(names, func(n string) bool { return !strings.Contains(string(out), "table inet "+n+"\n") })
	})
}

// waitDataPath waits until node's Speaker has the DataPath condition with status and reason
// and a message containing note.
func (e *l2Env) waitDataPath(t *testing.T, node string, status metav1.ConditionStatus, reason, note string) {
	t.Helper()
	sp := &v1alpha1.Speaker{ObjectMeta: metav1.ObjectMeta{Name: node}}
	e.waitCondition(t, 20*time.Second, sp, func() []metav1.Condition { return sp.Status.Conditions }, v1alpha1.ConditionDataPath, status, reason, note)
}

// waitServiceCondition waits until the Service's condition of type typ has status and reason
// and a message containing note.
func (e *l2Env) waitServiceCondition(t *testing.T, name, typ string, status metav1.ConditionStatus, reason, note string) {
	t.Helper()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
	e.waitCondition(t, 20*time.Second, svc, func() []metav1.Condition { return svc.Status.Conditions }, typ, status, reason, note)
}

// waitCondition waits, at most within, until obj, read again on each poll, has the condition
// of type typ (from conditions) with status and reason and a message containing note, and says
// what it had when it does not.
func (e *l2Env) waitCondition(t *testing.T, within time.Duration, obj client.Object, conditions func() []metav1.Condition, typ string, status metav1.ConditionStatus, reason, note string) {
	t.Helper()
	var last *metav1.Condition
	if !pollUntil(within, func() bool {
		if e.c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj) != nil {
			return false
		}
		last = meta.FindStatusCondition(conditions(), typ)
		return last != nil && last.Status == status && last.Reason == reason && strings.Contains(last.Message, note)
	}) {
		var all []string
		for _, c := range conditions() {
			all = append(all, c.Type+"="+describeCondition(&c))
		}
		t.Fatalf("%T %s has %s %s, want %s %s (%q); its conditions: %s", obj, client.ObjectKeyFromObject(obj), typ, describeCondition(last),
			status, reason, note, strings.Join(all, "; "))
	}
}

func describeCondition(c *metav1.Condition) string {
	if c == nil {
		return "(none)"
	}
	return fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
}
