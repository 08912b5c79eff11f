package speaker

import (
	"os"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/portico-lb/portico/speaker/l2"
)

// TestStrictARPCondition: the condition is absent without kube-ipvs0, False while arp_ignore
// lets kube-ipvs0's addresses be answered on eth0 (0, 3: global addresses), True with 1, 2 or 8,
// Unknown when the sysctl cannot be read. procSys is a directory laid out as /proc/sys.
func TestStrictARPCondition(t *testing.T) {
	procSys := t.TempDir()
	dir := filepath.Join(procSys, "net/ipv4/conf/all")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	set := func(v string) {
		if err := os.WriteFile(filepath.Join(dir, "arp_ignore"), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	withIPVS := []l2.Verdict{{Name: "eth0", Answers: true}, {Name: "kube-ipvs0", Reason: "named kube-ipvs*"}}
	set("0")
	if c := strictARPCondition([]l2.Verdict{{Name: "eth0", Answers: true}}, procSys); c != nil {
		t.Fatalf("no kube-ipvs0 but %+v", c)
	}
	for _, tc := range []struct {
		value  string
		status metav1.ConditionStatus
		reason string
	}{{"0", metav1.ConditionFalse, "IPVSWithoutStrictARP"}, {"1", metav1.ConditionTrue, "ArpIgnoreSet"},
		{"2", metav1.ConditionTrue, "ArpIgnoreSet"}, {"3", metav1.ConditionFalse, "IPVSWithoutStrictARP"}, {"8", metav1.ConditionTrue, "ArpIgnoreSet"}, {"", metav1.ConditionUnknown, "ArpIgnoreUnreadable"}} {
		set(tc.value)
		c := strictARPCondition(withIPVS, procSys)
		if c == nil || c.Status != tc.status || c.Reason != tc.reason {
			t.Errorf("arp_ignore %q: %+v, want %s %s", tc.value, c, tc.status, tc.reason)
		}
	}
}
