package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// StartDaemon starts argv (a binary and its flags) in the node's namespace in weftd's place,
// the way Start starts weftd: output appended to LogPath after a line naming the run, a
// process group of its own, killed with this process unless the cluster is kept. Stop,
// Running, Pid, ExitState, WaitReady, LogTail and Close then treat it as the node's daemon.
// This is how a node runs flanneld (see FlanneldArgs), or weftd in a cluster made without
// Options.Weftd so that AddNode leaves the choice of daemon to the caller (see WeftdArgs). It
// is an error if the node's daemon is running.
func (n *Node) StartDaemon(argv ...string) error {
	if len(argv) == 0 {
		return fmt.Errorf("node %s: StartDaemon: no command", n.Name)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc != nil && !n.proc.exited() {
		return fmt.Errorf("node %s: its daemon is running already (pid %d)", n.Name, n.proc.cmd.Process.Pid)
	}
	logf, err := os.OpenFile(n.LogPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("node %s: opening the daemon log: %w", n.Name, err)
	}
	defer logf.Close() // the child has its own descriptor
	n.runs++
	// The same header as Start's, so that a log that changes daemons shows which ran when.
	fmt.Fprintf(logf, "=== weft-e2e %s: run %d: %s\n", time.Now().Format(time.RFC3339Nano), n.runs,
		strings.Join(argv, " "))
	// ip execs the daemon in place: signals sent to this process reach it, and its exit
	// status is the daemon's.
	cmd := exec.Command("ip", netnsExecArgs(n.NS, argv...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = n.c.procAttr()
	if n.c.opts.Kube != nil {
		cmd.Env = n.kubeEnv()
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("node %s: starting %s: %w", n.Name, argv[0], err)
	}
	p := &weftdProc{cmd: cmd, started: time.Now(), done: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // the status is in ProcessState
		p.state = cmd.ProcessState
		close(p.done)
	}()
	n.proc = p
	return nil
}

// WeftdArgs are the flags the harness gives weftd on this node (Options.WeftdArgs last), for
// StartDaemon.
func (n *Node) WeftdArgs() []string { return n.weftdArgs() }
