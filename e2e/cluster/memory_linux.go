package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Memory is what a process holds in memory, as /proc/<pid>/status says.
type Memory struct {
	RSS  int64 // resident now (VmRSS), in bytes
	Peak int64 // the most it has ever been resident (VmHWM), in bytes
}

// ReadMemory reads the resident memory of process pid, now and at its peak.
func ReadMemory(pid int) (Memory, error) {
	if pid == 0 {
		return Memory{}, errors.New("the daemon is not running")
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Memory{}, fmt.Errorf("reading the memory of pid %d: %w", pid, err)
	}
	defer f.Close()
	var m Memory
	found := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var dst *int64
		name, v, _ := strings.Cut(sc.Text(), ":")
		switch name {
		case "VmRSS":
			dst = &m.RSS
		case "VmHWM":
			dst = &m.Peak
		default:
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("parsing %s %q of pid %d: %w", name, v, pid, err)
		}
		*dst = kb << 10
		found++
	}
	if err := sc.Err(); err != nil {
		return Memory{}, fmt.Errorf("reading the memory of pid %d: %w", pid, err)
	}
	if found != 2 {
		return Memory{}, fmt.Errorf("pid %d: /proc/%d/status lacks VmRSS or VmHWM", pid, pid)
	}
	return m, nil
}
