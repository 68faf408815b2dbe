package telemetry

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/orrery-cluster/orrery/agent/internal/macos"
)

// IOReport names, as seen in macmon/asitop output on Apple silicon.
const (
	gpuStatsGroup    = "GPU Stats"
	gpuPStatesGroup  = "GPU Performance States"
	gpuResidencyName = "GPUPH"
	energyGroup      = "Energy Model"
	smcPowerKey      = "PSTR"
)

// darwinSensors reads Apple silicon GPU residency (IOReport), GPU or die
// temperature (HID event system) and system power (SMC, or IOReport energy
// counters as a fallback). Any source that fails to open stays nil and its
// field is reported as null.
type darwinSensors struct {
	log    *slog.Logger
	now    func() time.Time
	warned map[string]bool

	gpuSub  *macos.IOReportSubscription
	gpuPrev macos.CFRef

	temps     *macos.HIDTemperatures
	gpuTemps  []int // indexes into temps.Names()
	tdieTemps []int

	smc *macos.SMC

	energySub   *macos.IOReportSubscription
	energyPrev  macos.CFRef
	energyPrevT time.Time
}

func newSensorSource(logger *slog.Logger) sensorSource {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &darwinSensors{
		log:    logger.With("component", "sensors"),
		now:    time.Now,
		warned: map[string]bool{},
	}
	s.openGPU()
	s.openTemps()
	s.openPower()
	return s
}

// debugOnce logs a failure the first time it happens only: Read runs every
// interval and a missing sensor stays missing.
func (s *darwinSensors) debugOnce(key, msg string, err error) {
	if s.warned[key] {
		return
	}
	s.warned[key] = true
	s.log.Debug(msg, "err", err)
}

func (s *darwinSensors) openGPU() {
	sub, err := macos.NewIOReportSubscription(macos.IOReportGroup{Group: gpuStatsGroup, SubGroup: gpuPStatesGroup})
	if err != nil {
		s.debugOnce("gpu-open", "GPU usage unavailable", err)
		return
	}
	s.gpuSub = sub
}

func (s *darwinSensors) openTemps() {
	t, err := macos.OpenHIDTemperatures()
	if err != nil {
		s.debugOnce("temp-open", "temperature unavailable", err)
		return
	}
	for i, name := range t.Names() {
		switch {
		case strings.HasPrefix(name, "GPU"):
			s.gpuTemps = append(s.gpuTemps, i)
		case strings.HasPrefix(name, "PMU tdie"):
			s.tdieTemps = append(s.tdieTemps, i)
		}
	}
	if len(s.gpuTemps) == 0 && len(s.tdieTemps) == 0 {
		t.Close()
		s.debugOnce("temp-open", "temperature unavailable",
			fmt.Errorf("no GPU or PMU tdie sensor among %d HID sensors", len(t.Names())))
		return
	}
	s.temps = t
}

// openPower prefers the SMC's whole-system PSTR; only when that cannot be
// read does it subscribe to the (CPU+GPU only) IOReport energy counters.
func (s *darwinSensors) openPower() {
	smc, err := macos.OpenSMC()
	if err == nil {
		if _, err = smc.ReadFloat(smcPowerKey); err == nil {
			s.smc = smc
			return
		}
		smc.Close()
	}
	s.debugOnce("smc-open", "SMC power unavailable, trying IOReport energy", err)
	sub, err := macos.NewIOReportSubscription(macos.IOReportGroup{Group: energyGroup})
	if err != nil {
		s.debugOnce("energy-open", "power unavailable", err)
		return
	}
	s.energySub = sub
}

func (s *darwinSensors) Read() (SensorReading, error) {
	var r SensorReading
	r.GPUUsage = s.readGPU()
	r.Temp, r.TempSource = s.readTemp()
	r.SysPower, r.PowerSource = s.readPower()
	return r, nil
}

// readGPU returns 1 - idle residency / total residency of the GPUPH
// channel(s) since the previous Read; nil on the first Read.
func (s *darwinSensors) readGPU() *float64 {
	if s.gpuSub == nil {
		return nil
	}
	cur, err := s.gpuSub.Sample()
	if err != nil {
		s.debugOnce("gpu-sample", "GPU sample failed", err)
		return nil
	}
	prev := s.gpuPrev
	s.gpuPrev = cur
	if prev == 0 {
		return nil
	}
	defer macos.Release(prev)
	delta, err := macos.IOReportDelta(prev, cur)
	if err != nil {
		s.debugOnce("gpu-delta", "GPU sample delta failed", err)
		return nil
	}
	defer macos.Release(delta)

	var idle, total int64
	found := false
	// Sum over every GPUPH channel so multi-die chips count all GPUs.
	for _, ch := range macos.IOReportChannels(delta) {
		if ch.Name() != gpuResidencyName || ch.Group() != gpuStatsGroup || ch.SubGroup() != gpuPStatesGroup {
			continue
		}
		found = true
		for i := range ch.StateCount() {
			res := ch.StateResidency(i)
			if res <= 0 {
				continue
			}
			total += res
			// macmon also treats "DOWN" as not running.
			switch ch.StateName(i) {
			case "OFF", "IDLE", "DOWN":
				idle += res
			}
		}
	}
	if !found {
		s.debugOnce("gpu-channel", "GPU usage unavailable", fmt.Errorf("no %s channel", gpuResidencyName))
		return nil
	}
	if total <= 0 {
		return nil
	}
	u := min(max(1-float64(idle)/float64(total), 0), 1)
	return &u
}

// readTemp averages the GPU sensors, else the PMU die sensors.
func (s *darwinSensors) readTemp() (*float64, string) {
	if s.temps == nil {
		return nil, ""
	}
	if v := s.meanTemp(s.gpuTemps); v != nil {
		return v, "hid:gpu"
	}
	if v := s.meanTemp(s.tdieTemps); v != nil {
		return v, "hid:tdie"
	}
	s.debugOnce("temp-read", "temperature sensors gave no reading", nil)
	return nil, ""
}

func (s *darwinSensors) meanTemp(idx []int) *float64 {
	var sum float64
	n := 0
	for _, i := range idx {
		if v, ok := s.temps.Read(i); ok {
			sum += v
			n++
		}
	}
	if n == 0 {
		return nil
	}
	m := sum / float64(n)
	return &m
}

func (s *darwinSensors) readPower() (*float64, string) {
	if s.smc != nil {
		v, err := s.smc.ReadFloat(smcPowerKey)
		if err != nil || v < 0 {
			s.debugOnce("smc-read", "SMC PSTR read failed", err)
			return nil, ""
		}
		return &v, "smc:" + smcPowerKey
	}
	if s.energySub != nil {
		if v := s.readEnergy(); v != nil {
			return v, "ioreport:energy-model"
		}
	}
	return nil, ""
}

// energyScale converts an IOReport energy unit label to joules.
func energyScale(unit string) (float64, bool) {
	switch unit {
	case "mJ":
		return 1e-3, true
	case "uJ":
		return 1e-6, true
	case "nJ":
		return 1e-9, true
	}
	return 0, false
}

// readEnergy returns the summed power of the "* Energy" channels over the
// interval since the previous Read; nil on the first Read.
func (s *darwinSensors) readEnergy() *float64 {
	cur, err := s.energySub.Sample()
	if err != nil {
		s.debugOnce("energy-sample", "energy sample failed", err)
		return nil
	}
	now := s.now()
	prev, prevT := s.energyPrev, s.energyPrevT
	s.energyPrev, s.energyPrevT = cur, now
	if prev == 0 {
		return nil
	}
	defer macos.Release(prev)
	dt := now.Sub(prevT).Seconds()
	if dt <= 0 {
		return nil
	}
	delta, err := macos.IOReportDelta(prev, cur)
	if err != nil {
		s.debugOnce("energy-delta", "energy sample delta failed", err)
		return nil
	}
	defer macos.Release(delta)

	var joules float64
	found := false
	for _, ch := range macos.IOReportChannels(delta) {
		if ch.Group() != energyGroup || !strings.HasSuffix(ch.Name(), "Energy") {
			continue
		}
		unit := ch.Unit()
		scale, ok := energyScale(unit)
		if !ok {
			s.debugOnce("energy-unit:"+unit, "skipping energy channel with unknown unit",
				fmt.Errorf("channel %q unit %q", ch.Name(), unit))
			continue
		}
		joules += float64(ch.IntegerValue()) * scale
		found = true
	}
	if !found {
		s.debugOnce("energy-channel", "power unavailable", fmt.Errorf("no %s channel ending in Energy", energyGroup))
		return nil
	}
	w := joules / dt
	return &w
}

func (s *darwinSensors) Close() error {
	macos.Release(s.gpuPrev)
	macos.Release(s.energyPrev)
	s.gpuPrev, s.energyPrev = 0, 0
	s.gpuSub.Close()
	s.energySub.Close()
	s.temps.Close()
	s.gpuSub, s.energySub, s.temps = nil, nil, nil
	var err error
	if s.smc != nil {
		err = s.smc.Close()
		s.smc = nil
	}
	return err
}
