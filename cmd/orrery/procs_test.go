package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// runnerPids lists the runner processes whose parent is the agent ppid.
func runnerPids(ppid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces; split after ')'.
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		args := strings.Split(string(cmdline), "\x00")
		if len(f) > 1 && f[1] == fmt.Sprint(ppid) && len(args) > 1 && args[1] == "runner" && f[0] != "Z" {
			out = append(out, pid)
		}
	}
	slices.Sort(out)
	return out
}
