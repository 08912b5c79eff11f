package decide

import (
	"fmt"
	"testing"
)

func TestClosestLabels(t *testing.T) {
	gitea := map[string]string{"app": "gitea", "tier": "web"}
	for _, tc := range []struct {
		selector map[string]string
		pods     []map[string]string
		want     string
	}{
		{map[string]string{"app": "gittea"}, []map[string]string{gitea, gitea, gitea, {"app": "postgres"}}, "[3 pods have app=gitea]"},
		{map[string]string{"ap": "gitea"}, []map[string]string{gitea}, "[1 pod has app=gitea]"},
		{map[string]string{"app": "gitea", "tier": "frontend"}, []map[string]string{gitea, {"app": "gitea", "tier": "frontend2"}}, "[1 pod has app=gitea,tier=frontend2]"},
		{map[string]string{"app": "harbor"}, []map[string]string{{"app": "harbour"}, {"app": "harbr"}}, "[1 pod has app=harbour 1 pod has app=harbr]"}, // both one edit away: both named
		{map[string]string{"app.kubernetes.io/name": "grafana-dashboards"}, []map[string]string{gitea}, "[]"},
		{map[string]string{"app": "x"}, []map[string]string{{}}, "[]"},
	} {
		got := fmt.Sprint(closestLabels(tc.selector, tc.pods))
		if got != tc.want {
			t.Errorf("closestLabels(%v) = %s, want %s", tc.selector, got, tc.want)
		}
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{{"gitea", "gittea", 1}, {"", "abc", 3}, {"kitten", "sitting", 3}, {"same", "same", 0}} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
