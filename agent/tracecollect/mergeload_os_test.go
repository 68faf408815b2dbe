package tracecollect

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// How much CPU the merge load test's process got (mergeload_test.go): on
// a shared machine, heartbeats late because the OS ran other processes
// must not be taken for heartbeats the merge delayed. Linux only (from
// /proc); elsewhere the report says n/a.

// maxOSSamples bounds the samples kept (one per 50 ms).
const maxOSSamples = 1 << 14

// osSample is the CPU time this process's threads had used at t, the
// time they had spent runnable, waiting for a CPU, and the machine's busy
// and total CPU time (in USER_HZ ticks).
type osSample struct {
	t           time.Time
	cpu, wait   time.Duration
	busy, total int64
}

// readStat sums the machine's CPU time, busy and in all, from /proc/stat.
func readStat() (busy, total int64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total, true
}

// readSchedstat sums /proc/self/task/*/schedstat: CPU time, then time
// waiting on a run queue, in ns.
func readSchedstat() (cpu, wait time.Duration, ok bool) {
	dirs, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0, 0, false
	}
	for _, d := range dirs {
		b, err := os.ReadFile("/proc/self/task/" + d.Name() + "/schedstat")
		if err != nil {
			continue // the thread exited
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			return 0, 0, false
		}
		c, err1 := strconv.ParseInt(f[0], 10, 64)
		w, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			return 0, 0, false
		}
		cpu, wait = cpu+time.Duration(c), wait+time.Duration(w)
	}
	return cpu, wait, true
}

// osWatch samples the process's CPU every 50 ms until stopped.
type osWatch struct {
	done    chan struct{}
	stopped chan struct{}
	once    sync.Once
	samples []osSample
}

// watchOS starts sampling, the first sample taken before it returns.
func watchOS() *osWatch {
	w := &osWatch{done: make(chan struct{}), stopped: make(chan struct{})}
	if !w.sample() {
		close(w.stopped)
		return w
	}
	go func() {
		defer close(w.stopped)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-w.done:
				w.sample()
				return
			case <-t.C:
				if !w.sample() {
					return
				}
			}
		}
	}()
	return w
}

// sample takes one sample; it reports false where /proc cannot say.
func (w *osWatch) sample() bool {
	cpu, wait, ok := readSchedstat()
	busy, total, ok2 := readStat()
	if ok && ok2 && len(w.samples) < maxOSSamples {
		w.samples = append(w.samples, osSample{time.Now(), cpu, wait, busy, total})
	}
	return ok && ok2
}

// stop ends the watch and returns its samples.
func (w *osWatch) stop() []osSample {
	w.once.Do(func() { close(w.done) })
	<-w.stopped
	return w.samples
}

// cpuIn says how many CPUs the process used over [from, to], and how long
// its threads waited for one per second (the machine's other load), from
// the samples around the window.
func cpuIn(ss []osSample, from, to time.Time) string {
	a, b := -1, -1
	for i, s := range ss {
		if !s.t.After(from) {
			a = i
		}
		if b < 0 && !s.t.Before(to) {
			b = i
		}
	}
	if a < 0 || b < 0 || b <= a {
		return "process CPU n/a"
	}
	d := ss[b].t.Sub(ss[a].t).Seconds()
	busy := "n/a"
	if tot := ss[b].total - ss[a].total; tot > 0 {
		busy = fmt.Sprintf("%.2f", float64(ss[b].busy-ss[a].busy)/float64(tot)*float64(runtime.NumCPU()))
	}
	return fmt.Sprintf("process used %.2f CPUs, its threads waited %.2f s/s for a CPU; the machine used %s of %d",
		(ss[b].cpu-ss[a].cpu).Seconds()/d, (ss[b].wait-ss[a].wait).Seconds()/d, busy, runtime.NumCPU())
}
