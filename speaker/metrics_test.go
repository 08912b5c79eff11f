package speaker

import (
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSpeakerConditions: portico_speaker_condition has one series per condition of the Speaker,
// with its current status and reason: a changed one replaces its series, a removed one goes.
func TestSpeakerConditions(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	series := func() []string {
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, f := range families {
			if f.GetName() != "portico_speaker_condition" {
				continue
			}
			for _, s := range f.GetMetric() {
				var labels []string
				for _, l := range s.GetLabel() {
					labels = append(labels, l.GetName()+"="+l.GetValue())
				}
				out = append(out, strings.Join(labels, ","))
			}
		}
		slices.Sort(out)
		return out
	}
	steps := []struct {
		conds []metav1.Condition
		want  []string
	}{
		{[]metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Running"}, {Type: "StrictARP", Status: metav1.ConditionTrue, Reason: "ArpIgnoreSet"}},
			[]string{"condition=Ready,reason=Running,status=True", "condition=StrictARP,reason=ArpIgnoreSet,status=True"}},
		{[]metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Running"}, {Type: "StrictARP", Status: metav1.ConditionFalse, Reason: "IPVSWithoutStrictARP"}},
			[]string{"condition=Ready,reason=Running,status=True", "condition=StrictARP,reason=IPVSWithoutStrictARP,status=False"}},
		{[]metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Running"}},
			[]string{"condition=Ready,reason=Running,status=True"}},
	}
	for i, step := range steps {
		m.speakerConditions(step.conds)
		if got := series(); !slices.Equal(got, step.want) {
			t.Errorf("step %d: series %q, want %q", i, got, step.want)
		}
	}
}
