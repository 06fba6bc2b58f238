package kubetest

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestWaitStopped: waitStopped gives up on a process that runs, and returns once a stopped
// one's every thread is stopped.
func TestWaitStopped(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	pid := cmd.Process.Pid
	if err := waitStopped(pid, 50*time.Millisecond); err == nil {
		t.Error("waitStopped of a running process returned no error")
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := waitStopped(pid, 10*time.Second); err != nil {
		t.Error(err)
	}
	if n, err := runningThreads(pid); err != nil || n != 0 {
		t.Errorf("after waitStopped: %d threads run (%v)", n, err)
	}
}
