package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// process is one run of a long-lived program that the harness started in a namespace: a
// node's daemon, or a member of the cluster's etcd.
type process struct {
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{} // closed when it has exited and state is set
	// state is its exit status, valid once done is closed.
	state *os.ProcessState
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// spawn starts argv inside the network namespace ns with the environment env (nil: this
// process's), its output appended to logPath after a line naming the run (the run-th of
// this program there), so that a log that several runs share shows which wrote what. It
// runs in a process group of its own, killed with this process unless the cluster is kept
// (see procAttr).
func (c *Cluster) spawn(ns, logPath string, run int, env, argv []string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the log %s: %w", logPath, err)
	}
	defer logf.Close() // the child has its own descriptor
	fmt.Fprintf(logf, "=== weft-e2e %s: run %d: %s\n", time.Now().Format(time.RFC3339Nano), run, strings.Join(argv, " "))
	// ip execs the program in place: signals sent to this process reach it, and its exit
	// status is the program's.
	cmd := exec.Command("ip", netnsExecArgs(ns, argv...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = c.procAttr()
	cmd.Env = env
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	p := &process{cmd: cmd, started: time.Now(), done: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // the status is in ProcessState
		p.state = cmd.ProcessState
		close(p.done)
	}()
	return p, nil
}

// stop sends sig and waits for the process to exit; if it has not after timeout, it is
// killed, and killed says so.
func (p *process) stop(sig syscall.Signal, timeout time.Duration) (killed bool, err error) {
	if err := p.cmd.Process.Signal(sig); err != nil {
		return false, fmt.Errorf("sending %v: %w", sig, err)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return false, nil
	case <-timer.C:
		_ = p.cmd.Process.Kill() // it may exit right now on its own
		<-p.done
		return true, nil
	}
}

// logTail returns the last lines of the log at path.
func logTail(path string, lines int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "(no log)"
		}
		return fmt.Sprintf("(reading log: %v)", err)
	}
	data = bytes.TrimRight(data, "\n")
	for i, cut := len(data)-1, 0; i >= 0; i-- {
		if data[i] == '\n' {
			cut++
			if cut == lines {
				return string(data[i+1:])
			}
		}
	}
	return string(data)
}
