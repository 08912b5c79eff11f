package sim

import "iter"

// coroutine runs a lane's requests of a leading process: the controller's own writer code runs
// on it through iter.Pull, one request after another, so that the code can call the simulated
// apiserver as if the call blocked while the world runs on until the answer arrives (await).
// Only one coroutine runs at a time, so a seed stays deterministic.
type coroutine struct {
	r     *replica
	next  func() (struct{}, bool)
	stop  func()
	yield func(struct{}) bool
	// The request running now: what it was decided from, its code, what runs once it returns.
	d    *decision
	job  func()
	done func()
	idle bool // waiting for its next request, not for an answer
}

func (r *replica) newCoroutine() *coroutine {
	p := &coroutine{r: r}
	p.next, p.stop = iter.Pull(func(yield func(struct{}) bool) {
		p.yield = yield
		for {
			p.job()
			p.idle = true
			if !yield(struct{}{}) {
				return
			}
		}
	})
	r.coroutines = append(r.coroutines, p)
	return p
}

// run starts a request on the idle coroutine: job, for the decision d; done runs once it has
// returned.
func (p *coroutine) run(d *decision, job, done func()) {
	p.d, p.job, p.done, p.idle = d, job, done, false
	p.resume()
}

// resume runs p until it waits for an answer again, or its request returns.
func (p *coroutine) resume() {
	w := p.r.w
	prev := w.running
	w.running = p
	p.next()
	w.running = prev
	if p.idle {
		done := p.done
		p.d, p.job, p.done = nil, nil, nil
		done()
	}
}

// await suspends the running coroutine until the wake schedule is given is called. It returns false
// when the coroutine's process ended meanwhile: nobody reads the answer.
func (w *world) await(schedule func(wake func())) bool {
	p := w.running
	schedule(p.resume)
	return p.yield(struct{}{})
}

// stopCoroutines ends r's coroutines: their process is gone. A request in flight runs on to its end at
// once, every wait answered false, and what it does then reaches nothing (the process's ports
// are closed).
func (r *replica) stopCoroutines() {
	coroutines := r.coroutines
	r.coroutines = nil
	for _, p := range coroutines {
		prev := r.w.running
		r.w.running = p
		p.stop()
		r.w.running = prev
	}
}
