package sim

import (
	"fmt"
	"hash/fnv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/portico-lb/portico/controller/decide"
)

// submit is statusWriter.submit: decide.Writes says whether to send; a lane sends.
func (r *replica) submit(key string, cached *corev1.Service, apply func(*corev1.Service), health bool) {
	apply = r.onSimClock(apply)
	wr := r.writes.Submit(decide.NewWrite(key, cached, apply))
	if wr == nil {
		return
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	j := &job{Write: wr, health: health, lane: int(h.Sum32() % writeLanes), decision: &decision{replica: r.name, edit: edits(cached), allocation: !health, pools: r.known, kept: r.kept}, apply: apply}
	r.w.logf("%s decides %s: %s (from rv %s)", r.name, j.what(), describe(wr.Want), wr.Want.ResourceVersion)
	r.lanes[j.lane].jobs = append(r.lanes[j.lane].jobs, j)
	r.kick(j.lane)
	if r.w.busy() && r.w.chance(r.w.faults.pauseAfter) {
		r.pause(r.w.between(leaseDuration+time.Second, 3*leaseDuration))
	}
}

// onSimClock stamps the conditions apply sets with the simulated time: meta.SetStatusCondition
// takes the wall clock for a changed condition's lastTransitionTime, which would make the news
// desk's timing, and the writes compared with each other, depend on the machine.
func (r *replica) onSimClock(apply func(*corev1.Service)) func(*corev1.Service) {
	return func(svc *corev1.Service) {
		apply(svc)
		for i := range svc.Status.Conditions {
			if t := &svc.Status.Conditions[i].LastTransitionTime; t.Time.Before(epoch) || t.Time.After(epoch.Add(end)) {
				t.Time = epoch.Add(r.w.now)
			}
		}
	}
}

func (j *job) what() string {
	if j.health {
		return "health write for " + j.Key
	}
	return "allocation write for " + j.Key
}

func (r *replica) kick(i int) {
	if l := &r.lanes[i]; !l.busy && len(l.jobs) > 0 {
		l.busy = true
		r.w.after(r.w.between(10*time.Microsecond, 500*time.Microsecond), r, func() { r.runLane(i) })
	}
}

// runLane is one step of a lane: it sends its oldest write.
func (r *replica) runLane(i int) {
	l := &r.lanes[i]
	if !r.leading || len(l.jobs) == 0 {
		l.busy = false
		return
	}
	j := l.jobs[0]
	l.jobs = l.jobs[1:]
	r.send(j, j.Want.DeepCopy(), "")
}

// mayWrite is the check before every request: the leader context, and (unless NoLeaseCheck)
// a renewal within the renew deadline by the replica's own clock.
func (r *replica) mayWrite() error {
	if !r.leading {
		return errCancelled
	}
	if !r.w.opts.NoLeaseCheck && r.w.now-r.lastRenew >= renewDeadline {
		return errNoLease
	}
	return nil
}

// send sends one status update; a conflict is rebased (once), as the lane does.
func (r *replica) send(j *job, obj *corev1.Service, rebased string) {
	if err := r.mayWrite(); err != nil {
		r.w.logf("%s does not send its %s: %v", r.name, j.what(), err)
		r.finish(j, "", err)
		return
	}
	by := r.name + "'s " + j.what() + rebased
	base := obj.ResourceVersion
	r.request(func() error { return r.w.api.updateStatus(obj, by, j.decision) }, func(err error) {
		if apierrors.IsConflict(err) && rebased == "" {
			r.rebase(j)
			return
		}
		r.finish(j, base, err)
	})
}

// rebase reads the Service as stored now and sends what decide.Writes.Rebase makes of the job.
func (r *replica) rebase(j *job) {
	var cur *corev1.Service
	r.request(func() error {
		var ok bool
		if cur, ok = r.w.api.get(j.Key); !ok {
			return apierrors.NewNotFound(serviceResource, j.Key)
		}
		return nil
	}, func(err error) {
		if err != nil {
			r.finish(j, "", err)
			return
		}
		sent, err := r.writes.Rebase(j.Write, cur)
		if r.w.opts.OldConflictRule {
			sent, err = oldRebase(j, cur)
		}
		if sent == nil || err != nil {
			if err != nil {
				r.w.logf("%s drops its %s: %v", r.name, j.what(), err)
			}
			r.finish(j, "", err)
			return
		}
		// Whose write it met: the issue-30 bug is a rebase over another replica's (the next
		// leader's) write.
		over := " (rebased over the user's edit)"
		if w := r.w.api.writer[j.Key]; w == r.name {
			over = " (rebased over its own write)"
		} else if w != "user" {
			over = " (rebased over " + w + "'s write)"
		}
		r.send(j, sent, over)
	})
}

// finish is the end of a lane's write: the bookkeeping, a retry through the reconciler's
// queue after a failure, and the lane's next write.
func (r *replica) finish(j *job, base string, err error) {
	r.writes.Done(j.Write)
	backoff := r.writes.Finished(j.Write, base, err)
	if err != nil {
		q := &r.svcQ
		if j.health {
			q = &r.healthQ
		}
		r.w.after(backoff, r, func() { r.enqueue(q, j.Key) })
	}
	r.lanes[j.lane].busy = false
	r.kick(j.lane)
}

// request is one round trip to the apiserver: do runs there, done back here with its error.
// A request or its answer may be lost (the client times out, not knowing whether it landed).
func (r *replica) request(do func() error, done func(error)) {
	w, epoch := r.w, r.epoch
	back := func(d time.Duration, err error) { w.afterIn(d, r, epoch, func() { done(err) }) }
	timeout := w.between(time.Second, 3*time.Second)
	if w.busy() && w.chance(w.faults.lostRequest) {
		back(timeout, errTimeout)
		return
	}
	sent := w.now
	w.after(w.netDelay(), nil, func() {
		err := do()
		if w.busy() && w.chance(w.faults.lostResponse) {
			back(max(sent+timeout-w.now, 0), errTimeout)
			return
		}
		back(w.netDelay(), err)
	})
}

// oldRebase is the conflict rule before issue 30's fix, kept here to show what the simulator
// finds in it: the part, addresses included, re-applied to whatever is stored now.
func oldRebase(j *job, cur *corev1.Service) (*corev1.Service, error) {
	if cur.UID != j.Want.UID {
		return nil, fmt.Errorf("service %s was recreated: deciding again", j.Key)
	}
	sent := cur.DeepCopy()
	j.apply(sent)
	if equality.Semantic.DeepEqual(cur.Status, sent.Status) && equality.Semantic.DeepEqual(cur.Annotations, sent.Annotations) {
		return nil, nil
	}
	return sent, nil
}
