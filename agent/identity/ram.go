package identity

import "github.com/shirou/gopsutil/v4/mem"

func ramTotal() (uint64, error) {
	vm, err := mem.VirtualMemory()
	if err != nil {
		return 0, err
	}
	return vm.Total, nil
}
