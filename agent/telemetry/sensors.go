package telemetry

// SensorReading holds the OS-specific system values. A nil field is one the
// OS did not give; it is reported as JSON null, never as 0.
type SensorReading struct {
	// GPUUsage is the GPU's active residency over the last interval, 0..1.
	GPUUsage *float64
	// Temp is a representative temperature in °C: the GPU's on Apple
	// silicon, the CPU package's on Linux.
	Temp *float64
	// TempSource names the sensor(s) Temp came from, e.g. "hwmon:coretemp".
	TempSource string
	// SysPower is the power draw in watts: whole-system (SMC PSTR) on macOS,
	// the sum of RAPL package domains on Linux.
	SysPower *float64
	// PowerSource names where SysPower came from, e.g. "smc:PSTR", "rapl".
	PowerSource string
}

// sensorSource reads SensorReading once per system interval. Read is called
// from one goroutine only; implementations keep the previous sample to
// compute rates (GPU residency, energy → power). Close releases OS handles.
type sensorSource interface {
	Read() (SensorReading, error)
	Close() error
}
