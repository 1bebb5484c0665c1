package fleetproto

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/bettercompute/control-plane/test/teststack"
)

// The deterministic scheduler. Every actor (a heartbeat loop, an API call,
// a reconciler pass: a Lambda invocation) is a goroutine, and exactly one
// runs at a time: it runs until its next store call (or its next sleep)
// and hands control back; the scheduler then picks, by the seed, which
// runnable actor goes on, and what the call it stopped at does — proceed,
// fail before or after it reaches the server, crash the actor there
// (before or after), or stall it for a while (a slow function) so others
// overtake it. Time is a fake clock: it moves a little at every step (the
// calls' latency) and jumps to the next wake-up when every actor sleeps.
// Nothing depends on real time, so a seed replays the same run.

// decision is what the scheduler lets a store call do.
type decision int

const (
	proceed     decision = iota
	failBefore           // the request never reaches the server (an error answer)
	failAfter            // the server does it, the answer is lost (an error answer)
	crashBefore          // the actor dies before the request
	crashAfter           // the server does it, then the actor dies
)

var (
	errCrashed  = errors.New("sim: the actor crashed")
	errInjected = errors.New("sim: injected dependency failure")
)

// actor is one goroutine of the simulation.
type actor struct {
	id      int
	name    string
	run     func(ctx context.Context)
	resume  chan decision
	wake    time.Time // runnable once the clock reaches it
	started time.Time
	limit   time.Duration // its function's timeout (0: none)
	op      string        // the call it stopped at
	dead    bool
	faulted bool // a failure or crash was injected into one of its calls
	// clean: no failure, crash or stall is injected into its calls (an
	// adversary's actor); slowFlags: its first flag write is held that
	// long (reached is set when it is)
	clean     bool
	slowFlags time.Duration
	reached   *bool
	// cutAdoption: its registration's adoption is cut short at its bind
	// (the register race)
	cutAdoption bool
}

type actorKey struct{}

type event struct {
	a    *actor
	done bool
}

// rates are a run's fault rates, per mille of store calls.
type rates struct {
	crashBefore, crashAfter, failBefore, failAfter, stall int
}

type sched struct {
	rng     *rand.Rand
	clock   *teststack.Clock
	events  chan event
	waiting map[int]*actor
	nextID  int
	cur     *actor
	rates   rates
	steps   int
	trace   []string
	actors  int
	// counts for the summary
	crashes, failures, stalls int
	// onStep runs after every step (the checker's cheap part).
	onStep func()
}

func newSched(rng *rand.Rand, clock *teststack.Clock) *sched {
	return &sched{rng: rng, clock: clock, events: make(chan event), waiting: map[int]*actor{}}
}

// spawn adds an actor, runnable now; it may be called by the test before
// run or by a running actor.
func (s *sched) spawn(ctx context.Context, name string, limit time.Duration, run func(ctx context.Context)) *actor {
	a := &actor{id: s.nextID, name: name, run: run, resume: make(chan decision), wake: s.clock.Now(), limit: limit, op: "start"}
	s.nextID++
	s.actors++
	s.waiting[a.id] = a
	actx := context.WithValue(context.WithoutCancel(ctx), actorKey{}, a)
	go func() {
		<-a.resume
		a.started = s.clock.Now()
		a.run(actx)
		s.events <- event{a: a, done: true}
	}()
	return a
}

// spawnClean adds an actor into whose calls nothing is injected.
func (s *sched) spawnClean(ctx context.Context, name string, limit time.Duration, run func(ctx context.Context)) *actor {
	a := s.spawn(ctx, name, limit, run)
	a.clean = true
	return a
}

// running is the actor running now (nil: none, the test's own code).
func (s *sched) running() *actor { return s.cur }

// actorOf is the actor running ctx (nil: the test's own call).
func actorOf(ctx context.Context) *actor {
	a, _ := ctx.Value(actorKey{}).(*actor)
	return a
}

// alive reports whether the actor of ctx may go on.
func alive(ctx context.Context) bool {
	a := actorOf(ctx)
	return a == nil || !a.dead
}

// yield stops the calling actor at a store call until the scheduler lets
// it go on, and says what the call may do. Calls outside any actor (the
// test's own, at set-up and quiescence) go straight through.
func (s *sched) yield(ctx context.Context, op string) decision {
	a := actorOf(ctx)
	if a == nil {
		return proceed
	}
	if a.dead {
		return crashBefore
	}
	a.op = op
	s.events <- event{a: a}
	d := <-a.resume
	if a.limit > 0 && s.clock.Now().Sub(a.started) > a.limit {
		d = crashBefore // its function's timeout: cut off like a crash
	}
	switch d {
	case crashBefore, crashAfter:
		a.faulted = true
		defer func() { a.dead = true }()
	case failBefore, failAfter:
		a.faulted = true
	}
	return d
}

// sleep parks the calling actor for d of simulated time.
func (s *sched) sleep(ctx context.Context, d time.Duration) {
	a := actorOf(ctx)
	if a == nil || a.dead {
		return
	}
	a.wake = s.clock.Now().Add(d)
	a.op = "sleep"
	s.events <- event{a: a}
	<-a.resume
}

// run schedules the actors until every one ended.
func (s *sched) run() {
	for len(s.waiting) > 0 {
		now := s.clock.Now()
		var runnable []int
		next := time.Time{}
		for id, a := range s.waiting {
			if !a.wake.After(now) {
				runnable = append(runnable, id)
			} else if next.IsZero() || a.wake.Before(next) {
				next = a.wake
			}
		}
		if len(runnable) == 0 {
			s.clock.Advance(next.Sub(now))
			continue
		}
		slices.Sort(runnable)
		a := s.waiting[runnable[s.rng.IntN(len(runnable))]]
		s.clock.Advance(time.Duration(s.rng.IntN(40)) * time.Millisecond)
		d := proceed
		if a.op != "start" && a.op != "sleep" && !a.clean {
			var stall bool
			d, stall = s.draw()
			if stall {
				// A stall is injected too: up to 20 s, it can use up a
				// create's 10-s deadline, whose UNAVAILABLE is then the
				// right answer (check g; found by seed 9).
				s.stalls++
				a.faulted = true
				a.wake = s.clock.Now().Add(time.Duration(1+s.rng.IntN(20)) * time.Second)
				s.trace = append(s.trace, fmt.Sprintf("-  %s %s: stalled at %s", s.clock.Now().Format("15:04:05.000"), a.name, a.op))
				continue
			}
		}
		switch d {
		case crashBefore, crashAfter:
			s.crashes++
		case failBefore, failAfter:
			s.failures++
		}
		delete(s.waiting, a.id)
		op := a.op
		s.steps++
		s.cur = a
		a.resume <- d
		ev := <-s.events
		s.cur = nil
		if ev.done {
			s.note(fmt.Sprintf("%s: %s%s → done", a.name, op, decisionNote(d)))
		} else {
			s.note(fmt.Sprintf("%s: %s%s", a.name, op, decisionNote(d)))
			s.waiting[a.id] = a
		}
		if s.onStep != nil {
			s.onStep()
		}
	}
}

// draw is what the next store call does.
func (s *sched) draw() (decision, bool) {
	r := s.rates
	n := s.rng.IntN(1000)
	for _, c := range []struct {
		rate int
		d    decision
	}{{r.crashBefore, crashBefore}, {r.crashAfter, crashAfter}, {r.failBefore, failBefore}, {r.failAfter, failAfter}} {
		if n < c.rate {
			return c.d, false
		}
		n -= c.rate
	}
	return proceed, n < r.stall
}

func decisionNote(d decision) string {
	switch d {
	case failBefore:
		return " [fail before]"
	case failAfter:
		return " [fail after]"
	case crashBefore:
		return " [crash before]"
	case crashAfter:
		return " [crash after]"
	}
	return ""
}

func (s *sched) note(line string) {
	s.trace = append(s.trace, fmt.Sprintf("#%d %s %s", s.steps, s.clock.Now().Format("15:04:05.000"), line))
}

// tail is the last n lines of the trace.
func (s *sched) tail(n int) string {
	return strings.Join(s.trace[max(0, len(s.trace)-n):], "\n")
}

// call runs fn at a scheduling point as the decision says. fn observes
// what the server did (the checker's ledger) whether or not the answer
// reaches the caller.
func call[T any](s *sched, ctx context.Context, op string, fn func() (T, error)) (T, error) {
	var zero T
	switch d := s.yield(ctx, op); d {
	case crashBefore:
		return zero, errCrashed
	case failBefore:
		return zero, errInjected
	case crashAfter, failAfter:
		_, _ = fn()
		if d == crashAfter {
			return zero, errCrashed
		}
		return zero, errInjected
	}
	return fn()
}

func do(s *sched, ctx context.Context, op string, fn func() error) error {
	_, err := call(s, ctx, op, func() (struct{}, error) { return struct{}{}, fn() })
	return err
}
