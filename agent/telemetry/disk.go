package telemetry

import (
	"context"
	"fmt"
	"time"

	"github.com/shirou/gopsutil/v4/disk"

	"github.com/orrery-cluster/orrery/agent/state"
)

// DiskSampler reads the usage of the file system holding Path (the models
// directory).
type DiskSampler struct {
	NodeID string
	Path   string
}

func (*DiskSampler) Name() string { return "disk" }

func (d *DiskSampler) Sample(ctx context.Context) (state.Event, error) {
	u, err := disk.UsageWithContext(ctx, d.Path)
	if err != nil {
		return nil, fmt.Errorf("disk usage of %s: %w", d.Path, err)
	}
	return state.NodeDiskMeasured{NodeID: d.NodeID, Disk: state.NodeDisk{
		Path:      d.Path,
		Total:     state.Bytes(u.Total),
		Available: state.Bytes(u.Free),
		SampledAt: time.Now().UTC(),
	}}, nil
}
