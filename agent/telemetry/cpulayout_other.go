//go:build !linux && !darwin

package telemetry

func cpuLayout() CPULayout { return CPULayout{} }
