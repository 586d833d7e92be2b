package cuda

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"time"
)

// hostStream is a host device's stream: a goroutine that runs the
// operations pushed on it in order. enq counts operations pushed, done
// those finished; the first operation that fails makes the stream failed
// for good (as a fault makes a CUDA context unusable), and every later
// query returns that error.
type hostStream struct {
	dev *hostBackend
	id  int
	rng *rand.Rand // the goroutine's only

	mu        sync.Mutex
	cond      *sync.Cond
	queue     []func() error
	enq, done int64
	err       error
	destroyed bool
}

func (s *hostStream) String() string { return fmt.Sprintf("host stream %d", s.id) }

func (s *hostStream) handle() uintptr { return uintptr(s.id) }

func (s *hostStream) push(op func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return fmt.Errorf("%v is destroyed", s)
	}
	s.queue = append(s.queue, op)
	s.enq++
	s.cond.Broadcast()
	return nil
}

func (s *hostStream) loop() {
	for {
		s.mu.Lock()
		for len(s.queue) == 0 && !s.destroyed {
			s.cond.Wait()
		}
		if len(s.queue) == 0 {
			s.mu.Unlock()
			return
		}
		op := s.queue[0]
		s.queue = s.queue[1:]
		failed := s.err != nil
		s.mu.Unlock()
		var err error
		if !failed { // after a fault nothing runs; the queue drains
			s.pause()
			err = op()
		}
		s.mu.Lock()
		s.done++
		if err != nil && s.err == nil {
			s.err = err
		}
		s.cond.Broadcast()
		s.mu.Unlock()
	}
}

// pause is the stream's jitter before an operation: with a delay d set,
// one operation in 16 sleeps a random time below d and the others yield
// the processor up to twice, so that the goroutines' order varies at a
// small cost.
func (s *hostStream) pause() {
	d := s.dev.delay
	if d <= 0 {
		return
	}
	if x := s.rng.IntN(16); x == 0 {
		time.Sleep(time.Duration(s.rng.Int64N(int64(d))))
	} else {
		for range x % 3 {
			runtime.Gosched()
		}
	}
}

func (s *hostStream) query() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if s.done < s.enq {
		return errNotReady
	}
	return nil
}

// wait enqueues a wait for e's latest record (as cuStreamWaitEvent): the
// stream blocks until e's stream has reached it.
func (s *hostStream) wait(ev event) error {
	e, ok := ev.(*hostEvent)
	if !ok || e.dev != s.dev {
		return fmt.Errorf("event %v is not an event of %s", ev, s.dev.name())
	}
	e.mu.Lock()
	target := e.recorded
	e.mu.Unlock()
	return s.push(func() error { return e.waitFor(target) })
}

func (s *hostStream) destroy() error {
	s.mu.Lock()
	s.destroyed = true
	s.cond.Broadcast()
	s.mu.Unlock()
	return nil
}

// hostEvent is a host device's event: recorded counts its records (host
// side, at record time), reached those its streams have passed.
type hostEvent struct {
	dev    *hostBackend
	timing bool

	mu                sync.Mutex
	cond              *sync.Cond
	recorded, reached int64
	at                time.Time // when the latest reached record was passed
}

func (e *hostEvent) record(st stream) error {
	s, ok := st.(*hostStream)
	if !ok || s.dev != e.dev {
		return fmt.Errorf("stream %v is not a stream of %s", st, e.dev.name())
	}
	e.mu.Lock()
	e.recorded++
	gen := e.recorded
	e.mu.Unlock()
	return s.push(func() error {
		e.mu.Lock()
		e.reached = max(e.reached, gen)
		e.at = time.Now()
		e.cond.Broadcast()
		e.mu.Unlock()
		return nil
	})
}

// waitFor blocks until record gen is reached, or the device is closed.
func (e *hostEvent) waitFor(gen int64) error {
	stop := wakeOnClose(e.dev.closed, e)
	defer stop()
	e.mu.Lock()
	defer e.mu.Unlock()
	for e.reached < gen {
		select {
		case <-e.dev.closed:
			return errors.New("device closed while a stream waited for an event")
		default:
		}
		e.cond.Wait()
	}
	return nil
}

// wakeOnClose wakes e's waiters when closed is closed; the returned func
// stops that.
func wakeOnClose(closed chan struct{}, e *hostEvent) func() {
	quit := make(chan struct{})
	go func() {
		select {
		case <-closed:
			e.mu.Lock()
			e.cond.Broadcast()
			e.mu.Unlock()
		case <-quit:
		}
	}()
	return func() { close(quit) }
}

func (e *hostEvent) query() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.reached < e.recorded {
		return errNotReady
	}
	return nil
}

func (e *hostEvent) elapsedSince(start event) (float64, error) {
	st, ok := start.(*hostEvent)
	if !ok || !e.timing || !st.timing {
		return 0, errors.New("elapsed time needs two timing events of one device")
	}
	if e.query() != nil || st.query() != nil {
		return 0, errNotReady
	}
	st.mu.Lock()
	t0 := st.at
	st.mu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.at.Sub(t0).Seconds() * 1e3, nil
}

func (e *hostEvent) destroy() error { return nil }
