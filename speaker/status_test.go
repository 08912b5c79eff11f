package speaker

import (
	"testing"
	"time"

	"github.com/portico-lb/portico/api/v1alpha1"
)

// TestRoutesWaitForTheRefresh: a report that changes only status.bgp's routes is held until
// routesRefresh after the last write (so one Service change does not rewrite every advertising
// node's Speaker at once); any other change is written at once.
func TestRoutesWaitForTheRefresh(t *testing.T) {
	route := func(prefix string) statusReport {
		return statusReport{status: v1alpha1.SpeakerStatus{BGP: &v1alpha1.SpeakerBGP{
			Routes: []v1alpha1.AdvertisedRoute{{Prefix: prefix}}}}}
	}
	written := route("203.0.113.1/32")
	at := time.Unix(1_800_000_000, 0)
	if got := routesHold(nil, time.Time{}, written, at); got != 0 {
		t.Errorf("first report held %v", got)
	}
	moreRoutes := route("203.0.113.2/32")
	if got := routesHold(&written, at, moreRoutes, at.Add(3*time.Second)); got != routesRefresh-3*time.Second {
		t.Errorf("a routes-only change 3 s after a write held %v, want %v", got, routesRefresh-3*time.Second)
	}
	if got := routesHold(&written, at, moreRoutes, at.Add(routesRefresh)); got != 0 {
		t.Errorf("a routes-only change %v after a write held %v", routesRefresh, got)
	}
	other := moreRoutes
	other.status.ConfigErrors = []string{"a problem"}
	if got := routesHold(&written, at, other, at.Add(time.Second)); got != 0 {
		t.Errorf("a change beyond the routes held %v", got)
	}
}
