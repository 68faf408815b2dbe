package telemetry

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
)

// linuxSensors reads temperatures from hwmon and package power from RAPL
// (powercap). There is no GPU usage reader on Linux yet: GPUUsage stays nil.
type linuxSensors struct {
	root    string // "/" in production, a fixture tree in tests
	now     func() time.Time
	log     *slog.Logger
	scanned time.Time
	temps   []tempFile
	rapl    []raplDomain
	prevT   time.Time
	warned  bool
}

type tempFile struct {
	chip, label, path string
}

type raplDomain struct {
	dir      string
	maxRange uint64
	prev     uint64
	havePrev bool
}

// rescanEvery bounds how stale the list of sensor files may get.
const rescanEvery = time.Minute

func newSensorSource(log *slog.Logger) sensorSource {
	return &linuxSensors{root: "/", now: time.Now, log: log.With("component", "sensors")}
}

func (s *linuxSensors) Close() error { return nil }

func (s *linuxSensors) Read() (SensorReading, error) {
	now := s.now()
	if s.scanned.IsZero() || now.Sub(s.scanned) > rescanEvery {
		s.scan()
		s.scanned = now
	}
	var r SensorReading
	r.Temp, r.TempSource = s.readTemp()
	r.SysPower = s.readPower(now)
	if r.SysPower != nil {
		r.PowerSource = "rapl"
	}
	return r, nil
}

func (s *linuxSensors) scan() {
	s.temps = s.temps[:0]
	chips, _ := filepath.Glob(filepath.Join(s.root, "sys/class/hwmon/hwmon*"))
	for _, dir := range chips {
		chip := readTrim(filepath.Join(dir, "name"))
		inputs, _ := filepath.Glob(filepath.Join(dir, "temp*_input"))
		for _, in := range inputs {
			label := readTrim(strings.TrimSuffix(in, "_input") + "_label")
			s.temps = append(s.temps, tempFile{chip: chip, label: label, path: in})
		}
	}
	// Keep RAPL counters across rescans so power stays continuous.
	old := map[string]raplDomain{}
	for _, d := range s.rapl {
		old[d.dir] = d
	}
	s.rapl = s.rapl[:0]
	doms, _ := filepath.Glob(filepath.Join(s.root, "sys/class/powercap/intel-rapl:*"))
	for _, dir := range doms {
		// Top-level domains only ("intel-rapl:0"), not subzones ("intel-rapl:0:1").
		if strings.Count(filepath.Base(dir), ":") != 1 {
			continue
		}
		if !strings.HasPrefix(readTrim(filepath.Join(dir, "name")), "package") {
			continue
		}
		d, ok := old[dir]
		if !ok {
			d = raplDomain{dir: dir}
			d.maxRange, _ = strconv.ParseUint(readTrim(filepath.Join(dir, "max_energy_range_uj")), 10, 64)
		}
		s.rapl = append(s.rapl, d)
	}
}

// cpuChips are hwmon drivers whose readings are the CPU's.
var cpuChips = map[string]bool{"coretemp": true, "k10temp": true, "zenpower": true, "cpu_thermal": true, "soc_thermal": true}

// readTemp picks the CPU package temperature when a CPU chip reports one,
// else the hottest CPU sensor, else the hottest sensor of any kind.
func (s *linuxSensors) readTemp() (*float64, string) {
	var best, hottestCPU, hottest *float64
	var bestSrc, cpuSrc, anySrc string
	for _, t := range s.temps {
		milli, err := strconv.ParseFloat(readTrim(t.path), 64)
		if err != nil {
			continue
		}
		c := milli / 1000
		if c <= -40 || c >= 150 { // disconnected or bogus sensor
			continue
		}
		src := "hwmon:" + t.chip
		if cpuChips[t.chip] {
			switch l := strings.ToLower(t.label); {
			case strings.HasPrefix(l, "package"), l == "tctl", l == "tdie":
				if best == nil {
					best, bestSrc = state.Float(c), src
				}
			}
			if hottestCPU == nil || c > *hottestCPU {
				hottestCPU, cpuSrc = state.Float(c), src
			}
		}
		if hottest == nil || c > *hottest {
			hottest, anySrc = state.Float(c), src
		}
	}
	switch {
	case best != nil:
		return best, bestSrc
	case hottestCPU != nil:
		return hottestCPU, cpuSrc
	}
	return hottest, anySrc
}

// readPower sums the package domains' energy deltas over the elapsed time.
// energy_uj is root-only on most current kernels; unreadable means nil.
func (s *linuxSensors) readPower(now time.Time) *float64 {
	if len(s.rapl) == 0 {
		return nil
	}
	dt := now.Sub(s.prevT).Seconds()
	var joules float64
	complete := !s.prevT.IsZero() && dt > 0
	for i := range s.rapl {
		d := &s.rapl[i]
		raw, err := os.ReadFile(filepath.Join(d.dir, "energy_uj"))
		var v uint64
		if err == nil {
			v, err = strconv.ParseUint(strings.TrimSpace(string(raw)), 10, 64)
		}
		if err != nil {
			if !s.warned && errors.Is(err, os.ErrPermission) {
				s.log.Debug("RAPL energy counter not readable; power will be null", "dir", d.dir)
				s.warned = true
			}
			d.havePrev = false
			complete = false
			continue
		}
		switch {
		case !d.havePrev:
			complete = false
		case v >= d.prev:
			joules += float64(v-d.prev) / 1e6
		case d.maxRange > d.prev:
			// The counter wrapped at max_energy_range_uj.
			joules += float64(d.maxRange-d.prev+v) / 1e6
		default:
			// Went backwards past any known range (reset): skip a sample
			// rather than report nonsense.
			complete = false
		}
		d.prev, d.havePrev = v, true
	}
	s.prevT = now
	if !complete {
		return nil
	}
	return state.Float(joules / dt)
}

func readTrim(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
