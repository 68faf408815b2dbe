// Command tracebench supports scripts/stats-vs-python.sh: it writes a
// synthetic Chrome trace, and it times loading a trace and computing its
// statistics, separately.
//
//	tracebench gen [-spans 1000000] [-ranks 4] [-flows] [-counters] -o trace.json
//	tracebench stats [-runs 3] [-json stats.json] trace.json
//
// stats prints one line of key=value pairs (spans, bytes, load_ms, stats_ms:
// the best of -runs runs each) and writes the statistics as JSON.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/orrery-cluster/orrery/engine/trace"
	"github.com/orrery-cluster/orrery/engine/trace/tracetest"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "gen":
		err = gen(os.Args[2:])
	case "stats":
		err = stats(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracebench:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: tracebench gen [-spans n] [-ranks n] [-flows] [-counters] -o file\n       tracebench stats [-runs n] [-json file] file")
	os.Exit(2)
}

func gen(args []string) error {
	fs := flag.NewFlagSet("gen", flag.ExitOnError)
	spans := fs.Int("spans", 1_000_000, "number of spans")
	ranks := fs.Int("ranks", 4, "pipeline ranks")
	flows := fs.Bool("flows", false, "add flow ids to sends and receives (exo's loader would count the s/f events as spans)")
	counters := fs.Bool("counters", false, "add memory and link counters (exo's loader would count them as spans)")
	out := fs.String("o", "", "output file")
	fs.Parse(args)
	if *out == "" {
		return fmt.Errorf("gen: -o is required")
	}
	t := tracetest.Pipeline(tracetest.PipelineConfig{Spans: *spans, Ranks: *ranks, Flows: *flows, Counters: *counters})
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	if err := trace.WriteChrome(f, t); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func stats(args []string) error {
	fs := flag.NewFlagSet("stats", flag.ExitOnError)
	runs := fs.Int("runs", 3, "runs of each step; the best is reported")
	jsonOut := fs.String("json", "", "write the statistics here")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the loads here")
	fs.Parse(args)
	if fs.NArg() != 1 {
		usage()
	}
	path := fs.Arg(0)
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}

	if *cpuProfile != "" {
		pf, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
	}
	var t *trace.Trace
	bestLoad, firstLoad := time.Duration(1<<63-1), time.Duration(0)
	for range max(*runs, 1) {
		t = nil
		runtime.GC()
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		start := time.Now()
		t, err = trace.ReadChrome(f) // a file: ReadChrome sizes its buffers from it
		d := time.Since(start)
		f.Close()
		if err != nil {
			return err
		}
		bestLoad = min(bestLoad, d)
		if firstLoad == 0 {
			firstLoad = d // in a fresh process: its memory is faulted in
		}
	}
	pprof.StopCPUProfile()

	var st trace.Stats
	bestStats := time.Duration(1<<63 - 1)
	for range max(*runs, 1) * 2 {
		runtime.GC()
		start := time.Now()
		st = trace.ComputeStats(t.Spans)
		bestStats = min(bestStats, time.Since(start))
	}
	st.TaskID = t.TaskID

	fmt.Printf("spans=%d bytes=%d load_ms=%.1f first_load_ms=%.1f stats_ms=%.2f\n", len(t.Spans), fi.Size(),
		float64(bestLoad.Microseconds())/1000, float64(firstLoad.Microseconds())/1000, float64(bestStats.Microseconds())/1000)
	if *jsonOut != "" {
		b, err := json.Marshal(st)
		if err != nil {
			return err
		}
		return os.WriteFile(*jsonOut, b, 0o644)
	}
	return nil
}
