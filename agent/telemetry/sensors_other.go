//go:build !linux && !darwin

package telemetry

import "log/slog"

type noSensors struct{}

func newSensorSource(*slog.Logger) sensorSource { return noSensors{} }

func (noSensors) Read() (SensorReading, error) { return SensorReading{}, nil }
func (noSensors) Close() error                 { return nil }
