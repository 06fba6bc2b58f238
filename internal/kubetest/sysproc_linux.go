package kubetest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// sysProcAttr makes the kernel kill the API server when the test process dies
// without cleaning up (a panic, a timeout), so that no server outlives its test.
// The signal follows the death of the thread that started the server, which Go
// only ends for goroutines that exit while locked to it; tests of this package
// do not do that.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// freezeSignals are the signals that freeze and thaw a process.
func freezeSignals() (freeze, thaw os.Signal, err error) {
	return syscall.SIGSTOP, syscall.SIGCONT, nil
}

// waitStopped waits until every thread of process pid is stopped (state T in
// /proc/PID/task/TID/stat), for at most limit.
func waitStopped(pid int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		running, err := runningThreads(pid)
		if err != nil {
			return err
		}
		if running == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kubetest: %d threads of the API server (pid %d) still run %v after SIGSTOP", running, pid, limit)
		}
		time.Sleep(time.Millisecond)
	}
}

// runningThreads counts the threads of process pid that are not stopped.
func runningThreads(pid int) (int, error) {
	stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(stats) == 0 {
		return 0, fmt.Errorf("kubetest: the threads of pid %d: %v", pid, err)
	}
	n := 0
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			if os.IsNotExist(err) {
				continue // a thread that ended
			}
			return 0, fmt.Errorf("kubetest: %w", err)
		}
		// "TID (COMM) STATE ...": COMM may hold spaces and parentheses; the state follows
		// the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return 0, fmt.Errorf("kubetest: %s: unexpected %q", f, b)
		}
		if st := b[i+2]; st != 'T' && st != 't' {
			n++
		}
	}
	return n, nil
}
